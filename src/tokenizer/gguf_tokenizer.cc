// GGUF tokenizer metadata ↔ tokenizer.json (gguf_tokenizer.h).
#include "tokenizer/gguf_tokenizer.h"

#include <fmt/format.h>

#include <filesystem>
#include <unordered_map>

#include "io/safetensors_header.h"
#include "tokenizer/json_read.h"
#include "tokenizer/tiktoken.h"

namespace mla::tok {
namespace {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

Json split(const char* regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

Json sequence(std::initializer_list<const char*> regexes) {
  Json list = Json::array();
  for (const char* r : regexes) list.push_back(split(r));
  list.push_back({{"type", "ByteLevel"},
                  {"add_prefix_space", false},
                  {"trim_offsets", true},
                  {"use_regex", false}});
  return {{"type", "Sequence"}, {"pretokenizers", std::move(list)}};
}

// The pre-tokenizers of the DeepSeek tokenizer.json files, split by split (the \r \n inside the
// patterns are the raw characters, as in the files).
const Json& deepseek_v3_pre() {
  static const Json j = sequence(
      {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
       "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}"
       "\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"});
  return j;
}

const Json& deepseek_llm_pre() {
  static const Json j = sequence(
      {"[\r\n]",
       "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆ"
       "Έ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷ"
       "ᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐ"
       "ῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄ"
       "Ⰰ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-"
       "Ｚａ-"
       "ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
       "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"});
  return j;
}

// Kimi's pattern (tiktoken.h), under llama.cpp's name for it, "kimi-k2".
const Json& kimi_pre() {
  static const std::string pattern = kimi_pattern();
  static const Json j = sequence({pattern.c_str()});
  return j;
}

// The tokenizer.json form of a model directory's tokenizer: its tokenizer.json, or the one a
// tiktoken model converts to (as load_tokenizer_dir does).
Result<Json> directory_tokenizer_json(const std::string& model_dir, std::string* origin) {
  namespace fs = std::filesystem;
  *origin = (fs::path(model_dir) / "tokenizer.json").string();
  const std::optional<std::string> file = tokenizer_file(model_dir);
  if (!file || file->ends_with("tokenizer.json")) {
    MLA_ASSIGN_OR_RETURN(std::string text, read_text_file(*origin, kMaxTokenizerFileBytes));
    return parse_json(text, *origin);
  }
  *origin = *file;
  TokenizerConfig config;
  const std::string config_path = (fs::path(model_dir) / "tokenizer_config.json").string();
  std::error_code ec;
  if (fs::exists(config_path, ec)) {
    MLA_ASSIGN_OR_RETURN(std::string text, read_text_file(config_path, kMaxTokenizerFileBytes));
    MLA_ASSIGN_OR_RETURN(config, parse_tokenizer_config(text, config_path));
  }
  MLA_ASSIGN_OR_RETURN(std::string ranks_text, read_text_file(*file, kMaxTokenizerFileBytes));
  MLA_ASSIGN_OR_RETURN(std::vector<RankedToken> ranks, parse_tiktoken_ranks(ranks_text, *file));
  return tiktoken_tokenizer_json(ranks, kimi_pattern(), config.added_tokens_decoder);
}

const GgufValue* need(const GgufFile& f, const char* key, GgufType type, bool array) {
  const GgufValue* v = f.meta(key);
  if (!v || v->is_array() != array) return nullptr;
  if (array ? v->elem_type != type : v->type != type) return nullptr;
  return v;
}

std::optional<int64_t> int_meta(const GgufFile& f, const char* key) {
  const GgufValue* v = f.meta(key);
  if (!v || v->is_array() || v->type == GgufType::kString || v->type == GgufType::kF32 ||
      v->type == GgufType::kF64)
    return std::nullopt;
  return v->i;
}

GgufValue string_value(std::string s) {
  GgufValue v;
  v.type = GgufType::kString;
  v.s = std::move(s);
  return v;
}

}  // namespace

Result<Json> pre_tokenizer_of(std::string_view gguf_pre) {
  if (gguf_pre == "deepseek-v3") return deepseek_v3_pre();
  if (gguf_pre == "deepseek-llm") return deepseek_llm_pre();
  if (gguf_pre == "kimi-k2") return kimi_pre();
  return unimplemented(fmt::format(
      "GGUF pre-tokenizer \"{}\" is not supported (deepseek-v3, deepseek-llm or kimi-k2)",
      io_detail::quote_text(std::string(gguf_pre)).substr(0, 80)));
}

std::optional<std::string> gguf_pre_name(const Json& pre) {
  if (pre == deepseek_v3_pre()) return "deepseek-v3";
  if (pre == deepseek_llm_pre()) return "deepseek-llm";
  if (pre == kimi_pre()) return "kimi-k2";
  return std::nullopt;
}

Result<std::string> tokenizer_json_from_gguf(const GgufFile& f) {
  const std::string& path = f.path();
  const GgufValue* model = need(f, "tokenizer.ggml.model", GgufType::kString, false);
  if (!model)
    return invalid_argument(
        fmt::format("{}: tokenizer.ggml.model is missing: the file has no "
                    "tokenizer (give --tokenizer FILE)",
                    path));
  if (model->s != "gpt2")
    return unimplemented(
        fmt::format("{}: tokenizer.ggml.model \"{}\" is not supported (gpt2: "
                    "byte-level BPE)",
                    path, model->s.substr(0, 32)));
  const GgufValue* pre_name = need(f, "tokenizer.ggml.pre", GgufType::kString, false);
  MLA_ASSIGN_OR_RETURN(Json pre, pre_tokenizer_of(pre_name ? pre_name->s : "default"));
  // A tiktoken model's BPE takes a piece whole when it is a token (tiktoken.h).
  const bool ignore_merges = pre_name && pre_name->s == "kimi-k2";
  const GgufValue* tokens = need(f, "tokenizer.ggml.tokens", GgufType::kString, true);
  const GgufValue* merges = need(f, "tokenizer.ggml.merges", GgufType::kString, true);
  if (!tokens || !merges)
    return invalid_argument(fmt::format("{}: tokenizer.ggml.{} is missing or not a string array",
                                        path, tokens ? "merges" : "tokens"));
  const GgufValue* types = f.meta("tokenizer.ggml.token_type");
  if (types && (!types->is_array() || types->ints.size() != tokens->strings.size()))
    return invalid_argument(fmt::format(
        "{}: tokenizer.ggml.token_type must be an integer array as long as the {} tokens", path,
        tokens->strings.size()));
  Json vocab = Json::object();
  Json added = Json::array();
  for (size_t id = 0; id < tokens->strings.size(); ++id) {
    const int64_t type = types ? types->ints[id] : kNormal;
    if (type == kUnused) continue;
    const std::string& text = tokens->strings[id];
    if (vocab.contains(text))
      return invalid_argument(
          fmt::format("{}: tokenizer.ggml.tokens[{}] {} repeats an earlier token", path, id,
                      io_detail::quote_text(text)));
    vocab[text] = id;
    if (type == kControl || type == kUserDefined)
      added.push_back({{"id", id},
                       {"content", text},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", type != kControl},
                       {"special", type == kControl}});
  }
  Json merge_list = Json::array();
  for (size_t i = 0; i < merges->strings.size(); ++i) {
    const std::string& m = merges->strings[i];
    const size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string::npos)
      return invalid_argument(fmt::format("{}: tokenizer.ggml.merges[{}] {} is not \"left right\"",
                                          path, i, io_detail::quote_text(m)));
    merge_list.push_back(m);
  }
  const Json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", true},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  Json root = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", std::move(added)},
               {"normalizer", {{"type", "Sequence"}, {"normalizers", Json::array()}}},
               {"pre_tokenizer", std::move(pre)},
               {"post_processor", byte_level},
               {"decoder", byte_level},
               {"model",
                {{"type", "BPE"},
                 {"dropout", nullptr},
                 {"unk_token", nullptr},
                 {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr},
                 {"fuse_unk", false},
                 {"byte_fallback", false},
                 {"ignore_merges", ignore_merges},
                 {"vocab", std::move(vocab)},
                 {"merges", std::move(merge_list)}}}};
  return root.dump();
}

Result<LoadedTokenizer> load_tokenizer_gguf(const std::string& path) {
  MLA_ASSIGN_OR_RETURN(GgufSet set, GgufSet::open(path));
  const GgufFile& f = set.first();
  MLA_ASSIGN_OR_RETURN(std::string json, tokenizer_json_from_gguf(f));
  const std::string origin = f.path() + " (tokenizer.ggml.*)";
  MLA_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_json(json, origin));
  TokenizerConfig config;
  const GgufValue* tokens = f.meta("tokenizer.ggml.tokens");
  auto name_of = [&](const char* key) -> Result<std::optional<std::string>> {
    const std::optional<int64_t> id = int_meta(f, key);
    if (!id) return std::optional<std::string>();
    if (*id < 0 || size_t(*id) >= tokens->strings.size())
      return invalid_argument(fmt::format("{}: {} = {} is not a token id (the file has {})",
                                          f.path(), key, *id, tokens->strings.size()));
    return std::optional<std::string>(tokens->strings[size_t(*id)]);
  };
  MLA_ASSIGN_OR_RETURN(config.bos_token, name_of("tokenizer.ggml.bos_token_id"));
  MLA_ASSIGN_OR_RETURN(config.eos_token, name_of("tokenizer.ggml.eos_token_id"));
  config.add_bos_token = int_meta(f, "tokenizer.ggml.add_bos_token").value_or(0) != 0;
  if (const GgufValue* t = need(f, "tokenizer.chat_template", GgufType::kString, false))
    config.chat_template = t->s;
  return finish_loaded_tokenizer(std::move(tok), std::move(config), origin, origin);
}

Result<std::map<std::string, GgufValue, std::less<>>> gguf_tokenizer_metadata(
    const std::string& model_dir, int64_t vocab_size) {
  std::string tok_path;
  MLA_ASSIGN_OR_RETURN(Json root, directory_tokenizer_json(model_dir, &tok_path));
  const Json* model = root.contains("model") ? &root["model"] : nullptr;
  if (!model || !model->is_object() || model->value("type", "") != "BPE" ||
      !model->contains("vocab") || !(*model)["vocab"].is_object())
    return invalid_argument(fmt::format("{}: model must be a BPE model with a vocab", tok_path));
  const std::optional<std::string> pre =
      root.contains("pre_tokenizer") ? gguf_pre_name(root["pre_tokenizer"]) : std::nullopt;
  if (!pre)
    return unimplemented(fmt::format(
        "{}: its pre_tokenizer is not one GGUF can name (deepseek-v3, deepseek-llm or kimi-k2)",
        tok_path));
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int64_t> types(size_t(vocab_size), kUnused);
  auto place = [&](const std::string& t, int64_t id, int64_t type) -> Status {
    if (id < 0 || id >= vocab_size)
      return invalid_argument(fmt::format("{}: token {} has id {}, outside the model's {} rows",
                                          tok_path, io_detail::quote_text(t), id, vocab_size));
    tokens[size_t(id)] = t;
    types[size_t(id)] = type;
    return Status();
  };
  for (const auto& [t, id] : (*model)["vocab"].items()) {
    if (!id.is_number_integer())
      return invalid_argument(
          fmt::format("{}: vocab id of {} is not an integer", tok_path, io_detail::quote_text(t)));
    MLA_RETURN_IF_ERROR(place(t, id.get<int64_t>(), kNormal));
  }
  if (root.contains("added_tokens") && root["added_tokens"].is_array())
    for (const Json& a : root["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
          !a.contains("content") || !a["content"].is_string())
        return invalid_argument(
            fmt::format("{}: added_tokens entry {} lacks id / content", tok_path, json_excerpt(a)));
      MLA_RETURN_IF_ERROR(place(a["content"].get<std::string>(), a["id"].get<int64_t>(),
                                a.value("special", false) ? kControl : kUserDefined));
    }
  for (size_t id = 0; id < tokens.size(); ++id)
    if (types[id] == kUnused) tokens[id] = fmt::format("[PAD{}]", id);
  GgufValue merges;
  merges.type = GgufType::kArray;
  merges.elem_type = GgufType::kString;
  for (const Json& m : model->value("merges", Json::array())) {
    if (m.is_string())
      merges.strings.push_back(m.get<std::string>());
    else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
      merges.strings.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    else
      return invalid_argument(
          fmt::format("{}: merge {} is neither \"a b\" nor [a, b]", tok_path, json_excerpt(m)));
  }
  std::map<std::string, GgufValue, std::less<>> meta;
  meta["tokenizer.ggml.model"] = string_value("gpt2");
  meta["tokenizer.ggml.pre"] = string_value(*pre);
  GgufValue tv;
  tv.type = GgufType::kArray;
  tv.elem_type = GgufType::kString;
  tv.strings = std::move(tokens);
  meta["tokenizer.ggml.tokens"] = std::move(tv);
  GgufValue ty;
  ty.type = GgufType::kArray;
  ty.elem_type = GgufType::kI32;
  ty.ints = std::move(types);
  meta["tokenizer.ggml.token_type"] = std::move(ty);
  meta["tokenizer.ggml.merges"] = std::move(merges);
  // BOS / EOS / chat template from the directory's config, resolved as serving resolves them.
  MLA_ASSIGN_OR_RETURN(LoadedTokenizer loaded, load_tokenizer_dir(model_dir));
  auto id_value = [](int64_t id) {
    GgufValue v;
    v.type = GgufType::kU32;
    v.i = id;
    return v;
  };
  if (loaded.tokenizer.bos_id())
    meta["tokenizer.ggml.bos_token_id"] = id_value(*loaded.tokenizer.bos_id());
  if (loaded.tokenizer.eos_id())
    meta["tokenizer.ggml.eos_token_id"] = id_value(*loaded.tokenizer.eos_id());
  GgufValue add_bos;
  add_bos.type = GgufType::kBool;
  add_bos.i = loaded.config.add_bos_token ? 1 : 0;
  meta["tokenizer.ggml.add_bos_token"] = add_bos;
  if (!loaded.config.chat_template.empty())
    meta["tokenizer.chat_template"] = string_value(loaded.config.chat_template);
  return meta;
}

}  // namespace mla::tok
