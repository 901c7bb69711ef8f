#include "server/access.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "server/server.h"

namespace trainscope::server {

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

Status AccessList::Load(const std::string& path, AccessList* out) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot read the token file");
  std::stringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path, out);
}

Status AccessList::Parse(const std::string& text, const std::string& source, AccessList* out) {
  out->grants_.clear();
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    std::istringstream fields(line);
    std::string token, project, scope, extra;
    if (!(fields >> token)) continue;  // blank or a comment
    const std::string where = source + ":" + std::to_string(number) + ": ";
    if (!(fields >> project >> scope) || (fields >> extra)) {
      return Status::InvalidArgument(where + "expected TOKEN PROJECT SCOPE (three fields; SCOPE read or write)");
    }
    if (token.size() < kMinTokenChars) {
      return Status::InvalidArgument(where + "a token of " + std::to_string(token.size()) +
                                     " characters; use at least " + std::to_string(kMinTokenChars));
    }
    if (scope != "read" && scope != "write") {
      return Status::InvalidArgument(where + "scope '" + scope + "', expected read or write");
    }
    if (project.find('/') != std::string::npos) {
      return Status::InvalidArgument(where + "project '" + project + "' holds a '/' (a project is one name)");
    }
    out->grants_.push_back({token, project, scope == "write" ? Scope::kWrite : Scope::kRead});
  }
  if (out->grants_.empty()) return Status::InvalidArgument(source + ": no grants (expected TOKEN PROJECT SCOPE lines)");
  return Status::Ok();
}

bool AccessList::Known(const std::string& token) const {
  bool known = false;
  for (const Grant& g : grants_) known |= ConstantTimeEquals(g.token, token);
  return known;
}

bool AccessList::Allows(const std::string& token, const std::string& project, Scope scope) const {
  bool allowed = false;
  for (const Grant& g : grants_) {
    const bool matches = ConstantTimeEquals(g.token, token) && (g.project == "*" || g.project == project) &&
                         (scope == Scope::kRead || g.scope == Scope::kWrite);
    allowed |= matches && !project.empty();
  }
  return allowed;
}

std::vector<std::string> AccessList::Projects(const std::string& token) const {
  std::vector<std::string> projects;
  for (const Grant& g : grants_) {
    if (ConstantTimeEquals(g.token, token)) projects.push_back(g.project);
  }
  std::sort(projects.begin(), projects.end());
  projects.erase(std::unique(projects.begin(), projects.end()), projects.end());
  if (std::find(projects.begin(), projects.end(), "*") != projects.end()) return {"*"};
  return projects;
}

std::string ProjectOfRun(const std::string& run_name) {
  const size_t slash = run_name.find('/');
  return slash == std::string::npos ? std::string() : run_name.substr(0, slash);
}

}  // namespace trainscope::server
