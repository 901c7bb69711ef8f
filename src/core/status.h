// Status: the outcome of an operation that can fail. Errors are values, never surprises:
// a Status carries a message that names the file, the place and what was expected.
#pragma once

#include <string>
#include <utility>

namespace trainscope {

class Status {
 public:
  Status() = default;  // OK
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

}  // namespace trainscope
