// PCRE2 wrapper for the pre-tokenizer (see regex.h). One JIT stack per thread, grown on demand,
// so long runs of one character never touch the machine stack.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <fmt/format.h>

#include "io/safetensors_header.h"
#include "tokenizer/unicode_delta.h"
#include "tokenizer/utf8.h"

namespace mla::tok {
namespace {

constexpr size_t kJitStackStart = 32 * 1024;
constexpr size_t kJitStackMax = 64 * 1024 * 1024;

struct JitStack {
  pcre2_jit_stack* stack = pcre2_jit_stack_create(kJitStackStart, kJitStackMax, nullptr);
  ~JitStack() { pcre2_jit_stack_free(stack); }
};

pcre2_jit_stack* thread_jit_stack(void*) {
  thread_local JitStack s;
  return s.stack;
}

struct MatchData {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  ~MatchData() { pcre2_match_data_free(md); }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return fmt::format("error {}", code);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_context* mcontext = nullptr;
  bool jit = false;
  ~Impl() {
    pcre2_match_context_free(mcontext);
    pcre2_code_free(code);
  }
};

Result<Regex> Regex::compile(std::string_view pattern, bool literal, std::string_view where) {
  std::string translated;
  if (!literal) {
    MLA_ASSIGN_OR_RETURN(translated, translate_pattern(pattern, where));
  } else {
    translated = std::string(pattern);
  }
  auto impl = std::make_shared<Impl>();
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                             options, &err, &err_offset, nullptr);
  if (!impl->code)
    return invalid_argument(fmt::format("{}: regex {} does not compile at offset {}: {}", where,
                                        io_detail::quote_text(pattern), err_offset,
                                        pcre2_message(err)));
  impl->jit = pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE) == 0;
  impl->mcontext = pcre2_match_context_create(nullptr);
  if (impl->jit) pcre2_jit_stack_assign(impl->mcontext, thread_jit_stack, nullptr);
  Regex r;
  r.impl_ = std::move(impl);
  r.pattern_ = std::string(pattern);
  r.where_ = std::string(where);
  return r;
}

Status Regex::find_all(std::string_view subject, std::vector<Span>* out) const {
  thread_local MatchData data;
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t start = 0;
  while (start < subject.size()) {
    // Pieces are valid UTF-8 cut at code point boundaries, checked once by the caller.
    const int rc = impl_->jit ? pcre2_jit_match(impl_->code, s, subject.size(), start, 0, data.md,
                                                impl_->mcontext)
                              : pcre2_match(impl_->code, s, subject.size(), start,
                                            PCRE2_NO_UTF_CHECK, data.md, impl_->mcontext);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      return invalid_argument(fmt::format("{}: regex {} failed on a {}-byte piece: {}", where_,
                                          io_detail::quote_text(pattern_), subject.size(),
                                          pcre2_message(rc)));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    if (ov[1] > ov[0]) {
      out->push_back({ov[0], ov[1]});
      start = ov[1];
    } else {
      if (ov[0] >= subject.size()) break;
      size_t next = ov[0];
      utf8_next(subject, &next);
      start = next;
    }
  }
  return Status();
}

}  // namespace mla::tok
