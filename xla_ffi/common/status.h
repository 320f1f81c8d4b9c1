// Errors are values: every fallible native call returns a Status, propagated with
// ACCL_RETURN_IF_ERROR and turned into ffi::Error / a Python exception at the boundary.
#pragma once

#include <sstream>
#include <string>
#include <utility>

namespace accl {

enum class Code { kOk = 0, kInvalidArgument, kTimeout, kAborted, kMismatch, kInternal };

inline const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kTimeout: return "timeout";
    case Code::kAborted: return "aborted";
    case Code::kMismatch: return "mismatch";
    case Code::kInternal: return "internal";
  }
  return "unknown";
}

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Concatenates anything streamable into one string: str_cat("rank ", 3, " of ", 8).
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

template <typename... Args>
Status error(Code code, Args&&... args) {
  return Status(code, str_cat(std::forward<Args>(args)...));
}

}  // namespace accl

#define ACCL_RETURN_IF_ERROR(expr)          \
  do {                                      \
    ::accl::Status accl_status_ = (expr);   \
    if (!accl_status_.ok()) return accl_status_; \
  } while (0)
