// tokenizer_config.json parsing and model-directory loading (see tokenizer_config.h).
#include "tokenizer/tokenizer_config.h"

#include <charconv>
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

// added_tokens_decoder: {"163584": {"content": "[BOS]", "special": true, ...}, ...}.
Result<std::vector<TiktokenAdded>> added_tokens_decoder(const Json& root, std::string_view origin) {
  std::vector<TiktokenAdded> out;
  const auto it = root.find("added_tokens_decoder");
  if (it == root.end() || it->is_null()) return out;
  if (!it->is_object())
    return invalid_argument(fmt::format("{}: added_tokens_decoder: expected an object", origin));
  for (auto e = it->begin(); e != it->end(); ++e) {
    const std::string where = fmt::format("{}: added_tokens_decoder[\"{}\"]", origin,
                                          io_detail::quote_text(e.key(), false, 40));
    int64_t id = -1;
    const std::string& key = e.key();
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id > INT32_MAX)
      return invalid_argument(fmt::format("{}: the key is not an id in [0, 2^31)", where));
    if (!e->is_object())
      return invalid_argument(fmt::format("{}: expected an object with \"content\"", where));
    TiktokenAdded a;
    a.id = int32_t(id);
    MLA_ASSIGN_OR_RETURN(a.content, get_string(*e, "content", where));
    MLA_ASSIGN_OR_RETURN(a.special, get_bool(*e, "special", false, where));
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

Result<TokenizerConfig> parse_tokenizer_config(std::string_view json, std::string_view origin) {
  MLA_ASSIGN_OR_RETURN(Json root, parse_json(json, origin));
  if (!root.is_object()) return invalid_argument(fmt::format("{}: expected a JSON object", origin));
  TokenizerConfig c;
  MLA_ASSIGN_OR_RETURN(c.bos_token, token_name(root, "bos_token", origin));
  MLA_ASSIGN_OR_RETURN(c.eos_token, token_name(root, "eos_token", origin));
  MLA_ASSIGN_OR_RETURN(c.add_bos_token, get_bool(root, "add_bos_token", false, origin));
  MLA_ASSIGN_OR_RETURN(c.added_tokens_decoder, added_tokens_decoder(root, origin));
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
  std::string tok_path = (fs::path(dir) / "tokenizer.json").string();
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
  const std::optional<std::string> file = tokenizer_file(dir);
  Result<Tokenizer> loaded = file && !file->ends_with("tokenizer.json")
                                 ? load_tiktoken_dir(dir, config)
                                 : Tokenizer::from_file(tok_path);
  if (!loaded.ok()) return loaded.status();
  Tokenizer tok = std::move(*loaded);
  if (file) tok_path = *file;
  return finish_loaded_tokenizer(std::move(tok), std::move(config), config_path.string(), tok_path);
}

std::optional<std::string> tokenizer_file(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "tiktoken.model"})
    if (const fs::path p = fs::path(dir) / name; fs::exists(p, ec)) return p.string();
  return std::nullopt;
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
