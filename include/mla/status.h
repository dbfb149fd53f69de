// mla::Status and mla::Result<T>: how every fallible operation reports failure (no exceptions).
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace mla {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad flag, config value, tensor shape
  kNotFound,          // missing file or tensor
  kDataLoss,          // corrupt or truncated file
  kIoError,           // the OS refused (open, mmap, write)
  kOutOfMemory,       // a big allocation failed
  kUnimplemented,     // valid request we do not support (yet)
  kResourceExhausted  // a full pool or queue: a normal state, not a bug
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: <message>"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status not_found(std::string m) {
  return {StatusCode::kNotFound, std::move(m)};
}
inline Status data_loss(std::string m) {
  return {StatusCode::kDataLoss, std::move(m)};
}
inline Status io_error(std::string m) {
  return {StatusCode::kIoError, std::move(m)};
}
inline Status out_of_memory(std::string m) {
  return {StatusCode::kOutOfMemory, std::move(m)};
}
inline Status unimplemented(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}

// Holds either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {
    if (std::get<Status>(v_).ok()) std::abort();  // an OK status carries no value: a bug
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace mla

// Propagate a non-OK Status from an expression returning Status.
#define MLA_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::mla::Status mla_status_ = (expr);        \
    if (!mla_status_.ok()) return mla_status_; \
  } while (0)

#define MLA_CONCAT_INNER_(a, b) a##b
#define MLA_CONCAT_(a, b) MLA_CONCAT_INNER_(a, b)
// MLA_ASSIGN_OR_RETURN(auto x, make_x()); returns the Status on failure.
#define MLA_ASSIGN_OR_RETURN(lhs, expr)                 \
  auto MLA_CONCAT_(mla_result_, __LINE__) = (expr);     \
  if (!MLA_CONCAT_(mla_result_, __LINE__).ok())         \
    return MLA_CONCAT_(mla_result_, __LINE__).status(); \
  lhs = std::move(MLA_CONCAT_(mla_result_, __LINE__)).value()
