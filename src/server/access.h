// Who may read and write which project on a team server: the token file of
// `trainscope serve DATABASE --token-file FILE`, one grant a line:
//
//   # TOKEN                            PROJECT   SCOPE
//   9f1c0c3e4b7a4d2e8a61f0b5c2d9e7a1   vision    write
//   5e2b8d0f1a3c4e6b9d7f2a4c6e8b0d1f   vision    read
//   5e2b8d0f1a3c4e6b9d7f2a4c6e8b0d1f   nlp       read
//
// A token may hold several projects; "write" includes "read"; "*" as PROJECT is every
// project. Tokens are compared in constant time, each against every grant.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace trainscope::server {

enum class Scope { kRead, kWrite };

class AccessList {
 public:
  // Fails naming the file, the line and what was expected.
  static Status Load(const std::string& path, AccessList* out);
  static Status Parse(const std::string& text, const std::string& source, AccessList* out);

  bool Known(const std::string& token) const;
  bool Allows(const std::string& token, const std::string& project, Scope scope) const;
  // The projects a token may read, sorted; "*" when it may read every one.
  std::vector<std::string> Projects(const std::string& token) const;
  bool empty() const { return grants_.empty(); }

 private:
  struct Grant {
    std::string token;
    std::string project;
    Scope scope;
  };
  std::vector<Grant> grants_;
};

// a == b, in time independent of where they differ (tokens; the lengths are not secret).
bool ConstantTimeEquals(const std::string& a, const std::string& b);

// The project of a run name "project/run..." (empty when the name has no '/').
std::string ProjectOfRun(const std::string& run_name);

}  // namespace trainscope::server
