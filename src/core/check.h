// MLA_CHECK / MLA_DCHECK: abort with the values when an internal invariant breaks (a bug).
// Never use these on anything read from outside; return a Status instead.
#pragma once

#include <fmt/format.h>

namespace mla::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond,
                               const std::string& msg);
}  // namespace mla::detail

#define MLA_CHECK(cond, ...)                                                              \
  do {                                                                                    \
    if (__builtin_expect(!(cond), 0))                                                     \
      ::mla::detail::check_failed(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
  } while (0)

#if defined(NDEBUG) && !defined(MLA_SANITIZE_BUILD)
// Unevaluated, so variables used only in checks do not warn as unused.
#define MLA_DCHECK(cond, ...) \
  do {                        \
    (void)sizeof(!(cond));    \
  } while (0)
#else
#define MLA_DCHECK(cond, ...) MLA_CHECK(cond, __VA_ARGS__)
#endif
