// tiny_tokenizer_files: the id layout and chat templates of tiny_tokenizer.h, written with
// nlohmann's ordered JSON so that keys come in the order Hugging Face writes them.
#include "tiny/tiny_tokenizer.h"

#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>
#include <span>

#include "core/check.h"
#include "tiny/tiny_checkpoint.h"

namespace mla {
namespace {

using Json = nlohmann::ordered_json;

// The GPT-2 byte alphabet: printable bytes 33-126, 161-172, 174-255 stand for themselves, the
// other 68 become U+0100 + n in byte order. Returned in vocabulary order (V3's ids 3..258).
struct ByteAlphabet {
  std::array<char32_t, 256> char_of{};  // by byte
  std::array<uint8_t, 256> order{};     // bytes in vocabulary order
};

ByteAlphabet byte_alphabet() {
  ByteAlphabet a;
  const auto printable = [](int b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  };
  int k = 0, extra = 0;
  for (int b = 0; b < 256; ++b)
    if (printable(b)) a.char_of[size_t(b)] = char32_t(b), a.order[size_t(k++)] = uint8_t(b);
  for (int b = 0; b < 256; ++b)
    if (!printable(b)) a.char_of[size_t(b)] = char32_t(256 + extra++), a.order[size_t(k++)] = b;
  return a;
}

void append_utf8(char32_t cp, std::string* out) {  // cp < 0x800 here
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

// Raw bytes → their token text in the byte alphabet (" the" → "Ġthe").
std::string token_text(const ByteAlphabet& a, std::string_view raw) {
  std::string s;
  for (unsigned char b : raw) append_utf8(a.char_of[b], &s);
  return s;
}

// Common English pairs: a subset of DeepSeek-V3's merges, in V3's rank order (so each side is a
// byte or an earlier merge's result).
constexpr std::pair<const char*, const char*> kMerges[] = {
    {" ", "t"},    {" ", "a"},  {"i", "n"},   {"h", "e"},    {"e", "r"},  {"o", "n"},  {"r", "e"},
    {"e", "n"},    {"a", "t"},  {" ", "s"},   {" t", "he"},  {"o", "r"},  {"e", "s"},  {" ", "c"},
    {"a", "n"},    {" ", "o"},  {"i", "s"},   {"i", "t"},    {" ", "p"},  {" ", "w"},  {"a", "l"},
    {" ", "d"},    {"e", "d"},  {" ", "f"},   {"a", "r"},    {"in", "g"}, {"n", "d"},  {" ", "b"},
    {" ", "m"},    {"o", "u"},  {" o", "f"},  {" ", "in"},   {"l", "e"},  {" t", "o"}, {" a", "nd"},
    {" ", "h"},    {" t", "h"}, {"o", "m"},   {" ", "T"},    {" ", "I"},  {" ", "is"}, {" ", "y"},
    {" th", "at"}, {" a", "n"}, {" y", "ou"}, {" th", "is"}, {"l", "l"},
};

struct Added {
  const char* content;
  bool special;
};

// DeepSeek-V3's flags: BOS / EOS / pad special; the chat and tool markers are not
// (docs/TOKENIZER.md §DeepSeek-V3 tokenizer.json).
constexpr Added kDeepSeekLeading[] = {
    {"<｜begin▁of▁sentence｜>", true}, {"<｜end▁of▁sentence｜>", true}, {"<｜▁pad▁｜>", true}};
constexpr Added kDeepSeekTrailing[] = {
    {"<｜User｜>", false},
    {"<｜Assistant｜>", false},
    {"<｜tool▁calls▁begin｜>", false},
    {"<｜tool▁calls▁end｜>", false},
    {"<｜tool▁call▁begin｜>", false},
    {"<｜tool▁call▁end｜>", false},
    {"<｜tool▁outputs▁begin｜>", false},
    {"<｜tool▁outputs▁end｜>", false},
    {"<｜tool▁output▁begin｜>", false},
    {"<｜tool▁output▁end｜>", false},
    {"<｜tool▁sep｜>", false},
};
// MiniCPM3 (Llama-style SentencePiece in the real model: <unk> 0, <s> 1, </s> 2); here BOS and
// EOS first, as every tiny layout has them, and its ChatML markers last.
constexpr Added kMiniCpmLeading[] = {{"<s>", true}, {"</s>", true}, {"<unk>", true}};
constexpr Added kMiniCpmTrailing[] = {{"<|im_start|>", true}, {"<|im_end|>", true}};
constexpr Added kKimiLeading[] = {{"[BOS]", true}, {"[EOS]", true}};
constexpr Added kKimiTrailing[] = {{"<|im_end|>", true},
                                   {"<|im_user|>", true},
                                   {"<|im_assistant|>", true},
                                   {"<|im_system|>", true},
                                   {"<|im_middle|>", true},
                                   {"<|tool_calls_section_begin|>", true},
                                   {"<|tool_calls_section_end|>", true},
                                   {"<|tool_call_begin|>", true},
                                   {"<|tool_call_argument_begin|>", true},
                                   {"<|tool_call_end|>", true}};

// Jinja templates of each chat format (docs/TOKENIZER.md §Chat formats), matching
// tok::render_chat's output for messages without tool calls; detect_chat_format keys on their
// markers.
constexpr const char* kV3Template =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
    "{% endif %}{% set ns = namespace(system_prompt='', first=true) %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.first %}"
    "{% set ns.system_prompt = message['content'] %}{% set ns.first = false %}{%- else %}"
    "{% set ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] %}{%- endif %}"
    "{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}"
    "{%- for message in messages %}{%- if message['role'] == 'user' %}"
    "{{ '<｜User｜>' + message['content'] }}{%- elif message['role'] == 'assistant' %}"
    "{{ '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' }}{%- endif %}"
    "{%- endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}";
constexpr const char* kV2Template =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
    "{% endif %}{{ bos_token }}{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\\n\\n' }}"
    "{%- elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + "
    "eos_token }}{%- elif message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}"
    "{%- endif %}{%- endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";
// {default} is the family's default system prompt.
constexpr const char* kKimiTemplate =
    "{%- if messages|length == 0 or messages[0]['role'] != 'system' %}"
    "{{ '<|im_system|>system<|im_middle|>{default}<|im_end|>' }}{%- endif %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}{{ '<|im_system|>' }}"
    "{%- elif message['role'] == 'user' %}{{ '<|im_user|>' }}{%- else %}"
    "{{ '<|im_assistant|>' }}{%- endif %}{%- if message['name'] %}"
    "{{ message['name'] }}{%- else %}{{ message['role'] }}{%- endif %}"
    "{{ '<|im_middle|>' + message['content'] + '<|im_end|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_assistant|>assistant<|im_middle|>' }}{%- endif %}";

// MiniCPM3's ChatML (tok::ChatFormat::kChatMl).
constexpr const char* kChatMlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct Layout {
  std::span<const Added> leading, trailing;
  std::string chat_template;
  bool tiktoken = false;  // Kimi's format: tiktoken.model + added_tokens_decoder
};

Result<Layout> family_layout(std::string_view family) {
  const auto kimi = [](const char* default_system) {
    std::string t = kKimiTemplate;
    t.replace(t.find("{default}"), 9, default_system);
    return t;
  };
  if (family == "v3") return Layout{kDeepSeekLeading, kDeepSeekTrailing, kV3Template};
  if (family == "v2" || family == "v2-lite")
    return Layout{kDeepSeekLeading, kDeepSeekTrailing, kV2Template};
  if (family == "kimi-k2")
    return Layout{kKimiLeading, kKimiTrailing,
                  kimi("You are Kimi, an AI assistant created by Moonshot AI."), true};
  if (family == "moonlight")
    return Layout{kKimiLeading, kKimiTrailing,
                  kimi("You are a helpful assistant provided by Moonshot-AI."), true};
  if (family == "minicpm3") return Layout{kMiniCpmLeading, kMiniCpmTrailing, kChatMlTemplate};
  return invalid_argument(fmt::format("tiny tokenizer: unknown family \"{}\" (expected one of {})",
                                      family, fmt::join(tiny_family_names(), ", ")));
}

Json added_token(int64_t id, const Added& a) {
  return {{"id", id},        {"content", a.content},     {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", !a.special}, {"special", a.special}};
}

Json split(const char* regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

Json byte_level(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", trim_offsets},
          {"use_regex", use_regex}};
}

std::string tokenizer_json(const Layout& l) {
  const ByteAlphabet alphabet = byte_alphabet();
  Json vocab = Json::object();
  Json added = Json::array();
  int64_t id = 0;
  for (const Added& a : l.leading) {  // in the BPE vocabulary too, as V3's ids 0-2
    added.push_back(added_token(id, a));
    vocab[a.content] = id++;
  }
  for (uint8_t b : alphabet.order) {
    std::string text;
    append_utf8(alphabet.char_of[b], &text);
    vocab[text] = id++;
  }
  Json merges = Json::array();
  for (const auto& [left, right] : kMerges) {
    const std::string l_text = token_text(alphabet, left), r_text = token_text(alphabet, right);
    const std::string joined = l_text + r_text;
    MLA_CHECK(vocab.contains(l_text) && vocab.contains(r_text) && !vocab.contains(joined),
              "tiny tokenizer: merge \"{}\" + \"{}\" needs both sides and a new result", left,
              right);
    merges.push_back(l_text + " " + r_text);
    vocab[joined] = id++;
  }
  for (const Added& a : l.trailing) added.push_back(added_token(id++, a));

  Json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  // DeepSeek-V3's pre-tokenizer (docs/TOKENIZER.md §DeepSeek-V3 tokenizer.json); the \r\n in the
  // patterns are the raw characters, as in V3's file.
  Json pre = {{"type", "Sequence"},
              {"pretokenizers",
               {split("\\p{N}{1,3}"), split("[一-龥぀-ゟ゠-ヿ]+"),
                split("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"
                      "[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|"
                      "\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
                byte_level(false, true, false)}}};
  Json root = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", std::move(added)},
               {"normalizer", {{"type", "Sequence"}, {"normalizers", Json::array()}}},
               {"pre_tokenizer", std::move(pre)},
               {"post_processor", byte_level(true, false, true)},
               {"decoder", byte_level(true, true, true)},
               {"model", std::move(model)}};
  return root.dump(2) + "\n";
}

std::string base64(std::string_view raw) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < raw.size(); i += 3) {
    const size_t n = std::min<size_t>(3, raw.size() - i);
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? uint8_t(raw[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// tiktoken.model: the same byte tokens and merge results as tokenizer_json, one
// "<base64> <id>" line each; the ids are the ranks, so merge priority follows kMerges' order.
std::string tiktoken_model(const Layout& l) {
  const ByteAlphabet alphabet = byte_alphabet();
  std::string out;
  int64_t id = int64_t(l.leading.size());
  for (uint8_t b : alphabet.order)
    out += fmt::format("{} {}\n", base64(std::string(1, char(b))), id++);
  for (const auto& [left, right] : kMerges)
    out += fmt::format("{} {}\n", base64(std::string(left) + right), id++);
  return out;
}

Json token_entry(const char* content) {
  return {{"__type", "AddedToken"}, {"content", content}, {"lstrip", false},
          {"normalized", true},     {"rstrip", false},    {"single_word", false}};
}

std::string tokenizer_config_json(const Layout& l, const ModelConfig& c) {
  const char* bos = l.leading[0].content;
  const char* eos = l.leading[1].content;
  const Json j = {{"add_bos_token", true},
                  {"add_eos_token", false},
                  {"bos_token", token_entry(bos)},
                  {"clean_up_tokenization_spaces", false},
                  {"eos_token", token_entry(eos)},
                  {"legacy", true},
                  {"model_max_length", c.max_position_embeddings},
                  {"pad_token", token_entry(eos)},
                  {"sp_model_kwargs", Json::object()},
                  {"unk_token", nullptr},
                  {"tokenizer_class", "LlamaTokenizerFast"},
                  {"chat_template", l.chat_template}};
  if (!l.tiktoken) return j.dump(2) + "\n";
  // Kimi's config names its tiktoken class and lists the special tokens by id.
  Json k = j;
  k["tokenizer_class"] = "TikTokenTokenizer";
  Json decoder = Json::object();
  const int64_t first_trailing = int64_t(l.leading.size() + 256 + std::size(kMerges));
  for (size_t i = 0; i < l.leading.size() + l.trailing.size(); ++i) {
    const bool lead = i < l.leading.size();
    const Added& a = lead ? l.leading[i] : l.trailing[i - l.leading.size()];
    const int64_t id = lead ? int64_t(i) : first_trailing + int64_t(i - l.leading.size());
    decoder[std::to_string(id)] = {{"content", a.content}, {"lstrip", false},
                                   {"normalized", false},  {"rstrip", false},
                                   {"single_word", false}, {"special", a.special}};
  }
  k["added_tokens_decoder"] = std::move(decoder);
  return k.dump(2) + "\n";
}

}  // namespace

Result<TinyTokenizerFiles> tiny_tokenizer_files(std::string_view family,
                                                const ModelConfig& config) {
  MLA_ASSIGN_OR_RETURN(Layout layout, family_layout(family));
  // BOS and EOS are the first two leading tokens: ids 0 and 1.
  const int64_t ids =
      int64_t(layout.leading.size() + 256 + std::size(kMerges) + layout.trailing.size());
  if (config.bos_token_id != 0 || config.eos_token_ids.empty() || config.eos_token_ids[0] != 1)
    return invalid_argument(fmt::format(
        "tiny tokenizer: the layout puts BOS at 0 and EOS at 1, the config has bos_token_id {} "
        "and eos_token_id [{}]",
        config.bos_token_id, fmt::join(config.eos_token_ids, ", ")));
  if (config.vocab_size < ids)
    return invalid_argument(
        fmt::format("tiny tokenizer: {} ids do not fit in vocab_size {}", ids, config.vocab_size));
  if (layout.tiktoken)
    return TinyTokenizerFiles{"", tokenizer_config_json(layout, config), tiktoken_model(layout)};
  return TinyTokenizerFiles{tokenizer_json(layout), tokenizer_config_json(layout, config), ""};
}

}  // namespace mla
