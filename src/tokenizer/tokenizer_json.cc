// Loading tokenizer.json into a Tokenizer: each supported Hugging Face component is checked and
// built here; anything else is an error naming the field (never silently skipped).
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "io/safetensors_header.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_read.h"
#include "tokenizer/tokenizer.h"

namespace mla::tok {

using io_detail::quote_text;

class TokenizerBuilder {
 public:
  explicit TokenizerBuilder(std::string_view origin) : origin_(origin) {}
  Result<Tokenizer> build(const Json& root);

 private:
  std::string at(std::string_view field) const { return fmt::format("{}: {}", origin_, field); }
  Status check_normalizer(const Json& n, const std::string& field);
  Result<PreTokenizer> pre_tokenizer(const Json& p);
  Result<SplitStep> split_step(const Json& s, const std::string& field);
  Result<BpeModel> model(const Json& m);
  Result<std::vector<AddedToken>> added_tokens(const Json& a);
  Status check_decoder(const Json& d);
  Status check_post_processor(const Json& p);

  std::string origin_;
};

namespace {

Status unsupported(const std::string& where, std::string_view what, const Json& v) {
  return unimplemented(
      fmt::format("{}: unsupported {} {} (this tokenizer reads byte-level BPE as in DeepSeek)",
                  where, what, json_excerpt(v)));
}

std::string type_of(const Json& v) {
  if (!v.is_object()) return "";
  const auto it = v.find("type");
  return it != v.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

// Accepted and not applied: ByteLevel only fixes offsets, TemplateProcessing adds special ids
// that BOS handling (tokenizer_config's add_bos_token) already covers. Anything else would change
// the ids in a way encode does not reproduce.
Status TokenizerBuilder::check_post_processor(const Json& p) {
  if (p.is_null()) return Status();
  const std::string type = type_of(p);
  if (type == "ByteLevel" || type == "TemplateProcessing") return Status();
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const Json& q : p["processors"])
      if (const std::string t = type_of(q); t != "ByteLevel" && t != "TemplateProcessing")
        return unsupported(at("post_processor.processors"), "post_processor", q);
    return Status();
  }
  return unsupported(at("post_processor"), "post_processor", p);
}

Status TokenizerBuilder::check_normalizer(const Json& n, const std::string& field) {
  if (n.is_null()) return Status();
  if (type_of(n) == "Sequence") {
    const auto it = n.find("normalizers");
    if (it == n.end() || !it->is_array())
      return invalid_argument(fmt::format("{}.normalizers: expected an array", at(field)));
    for (size_t i = 0; i < it->size(); ++i)
      MLA_RETURN_IF_ERROR(check_normalizer((*it)[i], fmt::format("{}.normalizers[{}]", field, i)));
    return Status();
  }
  return unsupported(at(field), "normalizer", n);
}

Result<SplitStep> TokenizerBuilder::split_step(const Json& s, const std::string& field) {
  const auto pat = s.find("pattern");
  if (pat == s.end() || !pat->is_object() || pat->size() != 1)
    return invalid_argument(
        fmt::format("{}.pattern: expected {{\"Regex\": ...}} or {{\"String\": ...}}", at(field)));
  const bool literal = pat->contains("String");
  const auto text = pat->find(literal ? "String" : "Regex");
  if (text == pat->end() || !text->is_string())
    return invalid_argument(
        fmt::format("{}.pattern: expected {{\"Regex\": ...}} or "
                    "{{\"String\": ...}}, got {}",
                    at(field), json_excerpt(*pat)));
  MLA_ASSIGN_OR_RETURN(Regex re,
                       Regex::compile(text->get<std::string>(), literal, at(field + ".pattern")));
  MLA_ASSIGN_OR_RETURN(std::string behavior, get_string(s, "behavior", at(field)));
  static const std::pair<const char*, SplitBehavior> kBehaviors[] = {
      {"Removed", SplitBehavior::kRemoved},
      {"Isolated", SplitBehavior::kIsolated},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous}};
  SplitStep step{std::move(re), SplitBehavior::kIsolated, false};
  const auto* b = std::find_if(std::begin(kBehaviors), std::end(kBehaviors),
                               [&](const auto& kv) { return behavior == kv.first; });
  if (b == std::end(kBehaviors))
    return unsupported(at(field + ".behavior"), "split behavior", behavior);
  step.behavior = b->second;
  MLA_ASSIGN_OR_RETURN(step.invert, get_bool(s, "invert", false, at(field)));
  return step;
}

Result<PreTokenizer> TokenizerBuilder::pre_tokenizer(const Json& p) {
  // Accepted shapes: ByteLevel alone, or Sequence[Split..., ByteLevel]. ByteLevel must come last
  // because it rewrites the text into its byte alphabet; later regexes would see that alphabet.
  std::vector<const Json*> steps;
  std::vector<std::string> fields;
  if (type_of(p) == "Sequence") {
    const auto it = p.find("pretokenizers");
    if (it == p.end() || !it->is_array())
      return invalid_argument(
          fmt::format("{}: expected an array", at("pre_tokenizer.pretokenizers")));
    for (size_t i = 0; i < it->size(); ++i) {
      steps.push_back(&(*it)[i]);
      fields.push_back(fmt::format("pre_tokenizer.pretokenizers[{}]", i));
    }
  } else {
    steps.push_back(&p);
    fields.push_back("pre_tokenizer");
  }
  if (steps.empty() || type_of(*steps.back()) != "ByteLevel")
    return unsupported(at("pre_tokenizer"), "pre-tokenizer (the last step must be ByteLevel)", p);
  std::vector<SplitStep> splits;
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    if (type_of(*steps[i]) != "Split")
      return unsupported(at(fields[i]), "pre-tokenizer", *steps[i]);
    MLA_ASSIGN_OR_RETURN(SplitStep s, split_step(*steps[i], fields[i]));
    splits.push_back(std::move(s));
  }
  const Json& bl = *steps.back();
  MLA_ASSIGN_OR_RETURN(bool add_prefix_space,
                       get_bool(bl, "add_prefix_space", true, at(fields.back())));
  MLA_ASSIGN_OR_RETURN(bool use_regex, get_bool(bl, "use_regex", true, at(fields.back())));
  std::optional<Regex> gpt2;
  if (use_regex) {
    MLA_ASSIGN_OR_RETURN(Regex re, Regex::compile(kGpt2Pattern, false, at(fields.back())));
    gpt2 = std::move(re);
  }
  return PreTokenizer(std::move(splits), add_prefix_space, std::move(gpt2));
}

Result<BpeModel> TokenizerBuilder::model(const Json& m) {
  if (!m.is_object() || type_of(m) != "BPE") return unsupported(at("model"), "model", m);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = m.find(key);
    if (it != m.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      return unsupported(at(fmt::format("model.{}", key)), "BPE option", *it);
  }
  if (const auto it = m.find("dropout");
      it != m.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0))
    return unsupported(at("model.dropout"), "BPE dropout", *it);
  BpeSpec spec;
  MLA_ASSIGN_OR_RETURN(spec.ignore_merges, get_bool(m, "ignore_merges", false, at("model")));
  const auto vocab = m.find("vocab");
  if (vocab == m.end() || !vocab->is_object())
    return invalid_argument(fmt::format("{}: expected an object of token → id", at("model.vocab")));
  spec.vocab.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      return invalid_argument(fmt::format("{}: token {} has id {}, not an integer in [0, 2^31)",
                                          at("model.vocab"), quote_text(token), json_excerpt(id)));
    spec.vocab.emplace_back(token, static_cast<int32_t>(id.get<int64_t>()));
  }
  const auto merges = m.find("merges");
  if (merges == m.end() || !merges->is_array())
    return invalid_argument(fmt::format("{}: expected an array", at("model.merges")));
  spec.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& mg = (*merges)[i];
    if (mg.is_string()) {  // "a b": the older form; tokens cannot contain a space
      const std::string& s = mg.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return invalid_argument(fmt::format("{}[{}]: expected \"left right\", got {}",
                                            at("model.merges"), i, quote_text(s)));
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      spec.merges.emplace_back(mg[0].get<std::string>(), mg[1].get<std::string>());
    } else {
      return invalid_argument(
          fmt::format("{}[{}]: expected \"left right\" or [left, right], got {}",
                      at("model.merges"), i, json_excerpt(mg)));
    }
  }
  return BpeModel::build(std::move(spec), origin_);
}

Result<std::vector<AddedToken>> TokenizerBuilder::added_tokens(const Json& a) {
  std::vector<AddedToken> out;
  if (a.is_null()) return out;
  if (!a.is_array())
    return invalid_argument(fmt::format("{}: expected an array", at("added_tokens")));
  std::unordered_map<std::string, size_t> seen;
  std::unordered_map<int32_t, size_t> seen_ids;  // id → index in out
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string field = fmt::format("added_tokens[{}]", i);
    const Json& t = a[i];
    if (!t.is_object()) return invalid_argument(fmt::format("{}: expected an object", at(field)));
    AddedToken tok;
    MLA_ASSIGN_OR_RETURN(tok.content, get_string(t, "content", at(field)));
    const auto id = t.find("id");
    if (id == t.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > INT32_MAX)
      return invalid_argument(fmt::format("{}.id: expected an integer in [0, 2^31), got {}",
                                          at(field),
                                          id == t.end() ? "nothing" : json_excerpt(*id)));
    tok.id = static_cast<int32_t>(id->get<int64_t>());
    if (tok.content.empty()) return invalid_argument(fmt::format("{}.content: empty", at(field)));
    MLA_ASSIGN_OR_RETURN(tok.special, get_bool(t, "special", false, at(field)));
    MLA_ASSIGN_OR_RETURN(tok.lstrip, get_bool(t, "lstrip", false, at(field)));
    MLA_ASSIGN_OR_RETURN(tok.rstrip, get_bool(t, "rstrip", false, at(field)));
    MLA_ASSIGN_OR_RETURN(tok.normalized, get_bool(t, "normalized", false, at(field)));
    MLA_ASSIGN_OR_RETURN(bool single_word, get_bool(t, "single_word", false, at(field)));
    if (single_word) return unsupported(at(field + ".single_word"), "added-token option", true);
    if (auto [it, fresh] = seen.emplace(tok.content, i); !fresh)
      return invalid_argument(fmt::format("{}: content {} repeats added_tokens[{}]", at(field),
                                          quote_text(tok.content), it->second));
    // A map, not a scan of `out`: a file with n added tokens must not cost n² comparisons.
    if (auto [it, fresh] = seen_ids.emplace(tok.id, i); !fresh)
      return invalid_argument(fmt::format("{}: id {} is given to both {} and {}", at(field), tok.id,
                                          quote_text(out[it->second].content),
                                          quote_text(tok.content)));
    out.push_back(std::move(tok));
  }
  return out;
}

Status TokenizerBuilder::check_decoder(const Json& d) {
  if (type_of(d) != "ByteLevel") return unsupported(at("decoder"), "decoder", d);
  return Status();
}

Result<Tokenizer> TokenizerBuilder::build(const Json& root) {
  if (!root.is_object())
    return invalid_argument(fmt::format("{}: expected a JSON object", origin_));
  static const char* const kKnown[] = {"version",        "truncation", "padding",
                                       "added_tokens",   "normalizer", "pre_tokenizer",
                                       "post_processor", "decoder",    "model"};
  // Iterators, not a structured binding: clang 14 (the fuzz build) cannot capture one in a lambda.
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& key = it.key();
    if (std::find_if(std::begin(kKnown), std::end(kKnown),
                     [&](const char* k) { return key == k; }) == std::end(kKnown))
      return unsupported(at(key), "top-level field", *it);
  }
  if (const auto it = root.find("truncation"); it != root.end() && !it->is_null())
    return unsupported(at("truncation"), "truncation", *it);
  // padding only shapes batches, so it is accepted and not applied; the post-processor is checked
  // below (check_post_processor).
  MLA_RETURN_IF_ERROR(check_normalizer(root.value("normalizer", Json()), "normalizer"));
  if (!root.contains("pre_tokenizer"))
    return invalid_argument(fmt::format("{}: the field \"pre_tokenizer\" is missing", origin_));
  MLA_ASSIGN_OR_RETURN(PreTokenizer pre, pre_tokenizer(root["pre_tokenizer"]));
  if (!root.contains("model"))
    return invalid_argument(fmt::format("{}: the field \"model\" is missing", origin_));
  MLA_ASSIGN_OR_RETURN(BpeModel bpe, model(root["model"]));
  MLA_RETURN_IF_ERROR(check_decoder(root.value("decoder", Json())));
  MLA_RETURN_IF_ERROR(check_post_processor(root.value("post_processor", Json())));
  MLA_ASSIGN_OR_RETURN(std::vector<AddedToken> added,
                       added_tokens(root.value("added_tokens", Json())));

  Tokenizer t;
  t.origin_ = origin_;
  // The per-id tables are sized by the largest id; like vocab ids (BpeModel::build), added-token
  // ids may not ask for more than the entries justify, and the limit must stay an int32.
  const int64_t id_bound = int64_t(bpe.vocab_size()) + int64_t(added.size()) + kMaxVocabIdGap;
  int64_t limit = int64_t(bpe.max_id()) + 1;
  for (size_t i = 0; i < added.size(); ++i) {
    if (added[i].id >= id_bound)
      return invalid_argument(fmt::format(
          "{}: id {} is not below the {} vocab + {} added entries + {} allowed as holes",
          at(fmt::format("added_tokens[{}]", i)), added[i].id, bpe.vocab_size(), added.size(),
          kMaxVocabIdGap));
    limit = std::max(limit, int64_t(added[i].id) + 1);
  }
  if (limit > INT32_MAX)
    return invalid_argument(
        fmt::format("{}: ids reach {}, past the int32 id range", origin_, limit - 1));
  t.token_bytes_.assign(size_t(limit), std::string());
  t.id_kind_.assign(size_t(limit), 0);
  t.added_index_.assign(size_t(limit), -1);
  for (int32_t id = 0; id <= bpe.max_id(); ++id)
    if (const std::string* text = bpe.id_to_token(id)) {
      t.token_bytes_[id] = token_text_to_bytes(*text);
      t.id_kind_[id] = 1;
    }
  // An added token may repeat a vocabulary entry (DeepSeek lists BOS, EOS and pad in both), but
  // not give its id another text: two tokens would share one embedding row
  // (docs/RELIABILITY.md §Checklist R27).
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& a = added[i];
    if (const std::string* text = a.id <= bpe.max_id() ? bpe.id_to_token(a.id) : nullptr;
        text && *text != a.content)
      return invalid_argument(fmt::format(
          "{}: id {} is the vocabulary's {}, not {}", at(fmt::format("added_tokens[{}]", i)), a.id,
          json_excerpt(Json(*text)), json_excerpt(Json(a.content))));
    t.token_bytes_[a.id] = token_text_to_bytes(a.content);
    t.id_kind_[a.id] = a.special ? 3 : 2;
    t.added_index_[a.id] = static_cast<int32_t>(i);
  }
  t.matcher_ = std::make_shared<AddedTokenMatcher>(added);
  t.added_ = std::move(added);
  t.bpe_ = std::make_shared<BpeModel>(std::move(bpe));
  t.pre_ = std::make_shared<PreTokenizer>(std::move(pre));
  return t;
}

Result<Tokenizer> Tokenizer::from_json(std::string_view json, std::string_view origin) {
  MLA_ASSIGN_OR_RETURN(Json root, parse_json(json, origin));
  return TokenizerBuilder(origin).build(root);
}

Result<Tokenizer> Tokenizer::from_json_object(const Json& root, std::string_view origin) {
  return TokenizerBuilder(origin).build(root);
}

Result<Tokenizer> Tokenizer::from_file(const std::string& path) {
  MLA_ASSIGN_OR_RETURN(std::string text, read_text_file(path, kMaxTokenizerFileBytes));
  return from_json(text, path);
}

}  // namespace mla::tok
