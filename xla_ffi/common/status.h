// Errors are values: every fallible native call returns a Status, propagated with
// ACCL_RETURN_IF_ERROR and turned into ffi::Error / a Python exception at the boundary.
#pragma once

#include <charconv>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
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

// Appends one value as `std::ostream <<` would print it. Strings and integers skip the
// stream: every call builds its label this way, and a std::ostringstream per piece cost
// microseconds per call (its locale setup), a tenth of a small all-reduce.
template <typename T>
void str_append(std::string& out, const T& value) {
  using U = std::decay_t<T>;
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out += std::string_view(value);
  } else if constexpr (std::is_same_v<U, char> || std::is_same_v<U, signed char> ||
                       std::is_same_v<U, unsigned char>) {
    out += static_cast<char>(value);
  } else if constexpr (std::is_integral_v<U> && !std::is_same_v<U, bool>) {
    char digits[24];
    out.append(digits, std::to_chars(digits, digits + sizeof(digits), value).ptr);
  } else {
    std::ostringstream stream;
    stream << value;
    out += stream.str();
  }
}

// Concatenates anything streamable into one string: str_cat("rank ", 3, " of ", 8).
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::string out;
  (str_append(out, args), ...);
  return out;
}

template <typename... Args>
Status error(Code code, const Args&... args) {
  return Status(code, str_cat(args...));
}

// `s`'s message without `who: ` in front, where it starts so (for a caller that names
// `who` itself, once).
inline std::string message_without(const Status& s, const std::string& who) {
  std::string message = s.message();
  if (message.rfind(who + ": ", 0) == 0) message.erase(0, who.size() + 2);
  return message;
}

}  // namespace accl

#define ACCL_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::accl::Status accl_status_ = (expr);        \
    if (!accl_status_.ok()) return accl_status_; \
  } while (0)
