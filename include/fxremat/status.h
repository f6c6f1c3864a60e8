// fxremat's single error channel: Status (ok or an error with a message and a
// location) and Expected<T> (a value or a Status). The library never throws;
// the CLI and the Python binding turn errors into exit code 2 / ValueError.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace fxremat {

// Why an operation failed. kBadInput covers everything a user can fix in the
// input (malformed JSON, dangling references, contradictions); kVerifyFailed
// is a numeric mismatch; kInternal is a broken invariant of fxremat itself.
enum class ErrorCode { kOk = 0, kBadInput, kVerifyFailed, kInternal };

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status BadInput(std::string message, std::string where = {}) {
    return Status(ErrorCode::kBadInput, std::move(message), std::move(where));
  }
  static Status VerifyFailed(std::string message, std::string where = {}) {
    return Status(ErrorCode::kVerifyFailed, std::move(message), std::move(where));
  }
  static Status Internal(std::string message, std::string where = {}) {
    return Status(ErrorCode::kInternal, std::move(message), std::move(where));
  }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // Where the problem is: a node name, a JSON path, or "file:line:col".
  const std::string& where() const { return where_; }
  // "where: message", the one line the CLI prints.
  std::string ToString() const {
    if (ok()) return "ok";
    return where_.empty() ? message_ : where_ + ": " + message_;
  }
  // Prefixes the location, e.g. the file name in front of a JSON path.
  Status WithContext(const std::string& outer) const {
    if (ok()) return *this;
    return Status(code_, message_, where_.empty() ? outer : outer + ": " + where_);
  }

 private:
  Status(ErrorCode code, std::string message, std::string where)
      : code_(code), message_(std::move(message)), where_(std::move(where)) {}
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
  std::string where_;
};

template <typename T>
class Expected {
 public:
  Expected(T value) : storage_(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Status status) : storage_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(storage_).ok() && "Expected built from an ok Status");
  }
  bool ok() const { return std::holds_alternative<T>(storage_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(storage_);
  }
  T& value() & {
    assert(ok() && "value() on an error");
    return std::get<T>(storage_);
  }
  const T& value() const& {
    assert(ok() && "value() on an error");
    return std::get<T>(storage_);
  }
  T&& value() && {
    assert(ok() && "value() on an error");
    return std::get<T>(std::move(storage_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> storage_;
};

}  // namespace fxremat

// Propagates an error Status from an expression returning Status.
#define FXREMAT_RETURN_IF_ERROR(expr)      \
  do {                                     \
    ::fxremat::Status _st = (expr);        \
    if (!_st.ok()) return _st;             \
  } while (0)

#define FXREMAT_CONCAT_INNER(a, b) a##b
#define FXREMAT_CONCAT(a, b) FXREMAT_CONCAT_INNER(a, b)
// `FXREMAT_ASSIGN_OR_RETURN(auto x, f());` unwraps an Expected or returns its error.
#define FXREMAT_ASSIGN_OR_RETURN(lhs, expr)                              \
  auto FXREMAT_CONCAT(_exp_, __LINE__) = (expr);                        \
  if (!FXREMAT_CONCAT(_exp_, __LINE__).ok())                            \
    return FXREMAT_CONCAT(_exp_, __LINE__).status();                    \
  lhs = std::move(FXREMAT_CONCAT(_exp_, __LINE__)).value()
