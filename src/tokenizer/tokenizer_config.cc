// tokenizer_config.json parsing and model-directory loading (see tokenizer_config.h).
#include "tokenizer/tokenizer_config.h"

#include <filesystem>

#include <fmt/format.h>

#include "io/safetensors_header.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/json_read.h"

namespace mla::tok {
namespace {

Result<std::optional<std::string>> token_name(const Json& root, const char* key,
                                              std::string_view origin) {
  const auto it = root.find(key);
  if (it == root.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return std::optional<std::string>((*it)["content"].get<std::string>());
  return invalid_argument(fmt::format("{}: {}: expected a string or {{\"content\": ...}}, got {}",
                                      origin, key, json_excerpt(*it)));
}

}  // namespace

Result<TokenizerConfig> parse_tokenizer_config(std::string_view json, std::string_view origin) {
  MLA_ASSIGN_OR_RETURN(Json root, parse_json(json, origin));
  if (!root.is_object()) return invalid_argument(fmt::format("{}: expected a JSON object", origin));
  TokenizerConfig c;
  MLA_ASSIGN_OR_RETURN(c.bos_token, token_name(root, "bos_token", origin));
  MLA_ASSIGN_OR_RETURN(c.eos_token, token_name(root, "eos_token", origin));
  MLA_ASSIGN_OR_RETURN(c.add_bos_token, get_bool(root, "add_bos_token", false, origin));
  const auto t = root.find("chat_template");
  if (t == root.end() || t->is_null()) return c;
  if (t->is_string()) {
    c.chat_template = t->get<std::string>();
    return c;
  }
  if (t->is_array()) {
    for (const Json& e : *t)
      if (e.is_object() && e.value("name", Json()) == "default" && e.contains("template") &&
          e["template"].is_string()) {
        c.chat_template = e["template"].get<std::string>();
        return c;
      }
  }
  return invalid_argument(
      fmt::format("{}: chat_template: expected a string or a list holding {{\"name\": \"default\", "
                  "\"template\": ...}}, got {}",
                  origin, json_excerpt(*t)));
}

Result<LoadedTokenizer> load_tokenizer_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (fs::path(dir).extension() == ".gguf") return load_tokenizer_gguf(dir);
  const std::string tok_path = (fs::path(dir) / "tokenizer.json").string();
  MLA_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_file(tok_path));
  TokenizerConfig config;
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(config_path, ec)) {
    MLA_ASSIGN_OR_RETURN(std::string text,
                         read_text_file(config_path.string(), kMaxTokenizerFileBytes));
    MLA_ASSIGN_OR_RETURN(config, parse_tokenizer_config(text, config_path.string()));
  }
  const fs::path jinja = fs::path(dir) / "chat_template.jinja";
  if (config.chat_template.empty() && fs::exists(jinja, ec)) {
    MLA_ASSIGN_OR_RETURN(config.chat_template,
                         read_text_file(jinja.string(), kMaxTokenizerFileBytes));
  }
  return finish_loaded_tokenizer(std::move(tok), std::move(config), config_path.string(), tok_path);
}

Result<LoadedTokenizer> finish_loaded_tokenizer(Tokenizer tok, TokenizerConfig config,
                                                const std::string& config_origin,
                                                const std::string& tok_origin) {
  std::optional<int32_t> ids[2];
  const std::optional<std::string>* names[2] = {&config.bos_token, &config.eos_token};
  const char* fields[2] = {"bos_token", "eos_token"};
  for (int i = 0; i < 2; ++i) {
    if (!*names[i]) continue;
    ids[i] = tok.token_to_id(**names[i]);
    if (!ids[i])
      return invalid_argument(fmt::format("{}: {} {} is not a token of {}", config_origin,
                                          fields[i], io_detail::quote_text(**names[i]),
                                          tok_origin));
  }
  tok.set_bos_eos(ids[0], ids[1]);
  // A recognised chat template must find its control tokens now, not at the first chat request
  // (docs/RELIABILITY.md §Checklist R30): render and encode a conversation that uses every role.
  if (!config.chat_template.empty())
    if (Result<ChatFormat> f = detect_chat_format(config.chat_template); f.ok()) {
      const std::vector<ChatMessage> probe = {{"system", std::string("s"), {}, "", ""},
                                              {"user", std::string("u"), {}, "", ""},
                                              {"assistant", std::string("a"), {}, "", ""},
                                              {"user", std::string("u"), {}, "", ""}};
      Result<std::vector<ChatPart>> parts = render_chat(*f, probe);
      Status st = parts.ok() ? encode_chat(tok, *parts).status() : parts.status();
      if (!st.ok())
        return invalid_argument(fmt::format("{}: the chat template ({}) does not fit {}: {}",
                                            config_origin, chat_format_name(*f), tok_origin,
                                            st.message()));
    }
  return LoadedTokenizer{std::move(tok), std::move(config)};
}

Result<LoadedTokenizer> load_tokenizer(const std::string& model_dir,
                                       const std::string& tokenizer_json) {
  if (model_dir.empty() == tokenizer_json.empty())
    return invalid_argument("give exactly one of a model directory (-m) or --tokenizer FILE");
  if (!model_dir.empty()) return load_tokenizer_dir(model_dir);
  MLA_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_file(tokenizer_json));
  return LoadedTokenizer{std::move(tok), TokenizerConfig{}};
}

}  // namespace mla::tok
