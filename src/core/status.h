// Status: the outcome of an operation that can fail. Errors are values, never surprises:
// a Status carries a kind, which callers branch on (the server maps it to an HTTP code),
// and a message that names the file, the place and what was expected, which people read.
#pragma once

#include <string>
#include <utility>

namespace trainscope {

enum class StatusCode : int {
  kOk = 0,
  kNotFound,         // the file, run, series or key asked for is not there
  kCorruption,       // the data is there but damaged or not in the expected form
  kInvalidArgument,  // the caller asked for something malformed or impossible
  kIOError,          // the system failed us: disk full, permission, a failing write
  kInternal,         // trainscope or a library it uses failed (a parser that would not start)
};

// "NotFound", "Corruption", ...: for logs and JSON.
inline const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kIOError: return "IOError";
    case StatusCode::kInternal: return "Internal";
  }
  return "Internal";
}

class Status {
 public:
  Status() = default;  // OK
  static Status Ok() { return Status(); }
  static Status NotFound(std::string message) { return Status(StatusCode::kNotFound, std::move(message)); }
  static Status Corruption(std::string message) { return Status(StatusCode::kCorruption, std::move(message)); }
  static Status InvalidArgument(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status IOError(std::string message) { return Status(StatusCode::kIOError, std::move(message)); }
  static Status Internal(std::string message) { return Status(StatusCode::kInternal, std::move(message)); }
  // The same kind with a new message, e.g. context prepended: s.WithMessage(path + ": " + s.message()).
  Status WithMessage(std::string message) const { return Status(code_, std::move(message)); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  bool IsNotFound() const { return code_ == StatusCode::kNotFound; }
  bool IsCorruption() const { return code_ == StatusCode::kCorruption; }
  bool IsInvalidArgument() const { return code_ == StatusCode::kInvalidArgument; }
  bool IsIOError() const { return code_ == StatusCode::kIOError; }
  const std::string& message() const { return message_; }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace trainscope
