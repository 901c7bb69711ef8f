#include "watch/run_facts.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace trainscope {

namespace fs = std::filesystem;

namespace {

std::string ReadFirstLine(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace

std::string HostName() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

std::string GitCommit(const std::string& dir) {
  std::error_code ec;
  fs::path at = fs::absolute(dir, ec);
  for (; !at.empty(); at = at.parent_path()) {
    fs::path git = at / ".git";
    if (fs::is_regular_file(git, ec)) {  // a worktree or submodule: "gitdir: <path>"
      const std::string line = ReadFirstLine(git);
      if (line.rfind("gitdir: ", 0) != 0) return "";
      git = fs::path(line.substr(8));
      if (git.is_relative()) git = at / git;
    }
    if (fs::is_directory(git, ec)) {
      const std::string head = ReadFirstLine(git / "HEAD");
      if (head.rfind("ref: ", 0) != 0) return head;  // detached HEAD holds the hash
      const std::string ref = head.substr(5);
      std::string hash = ReadFirstLine(git / ref);
      if (!hash.empty()) return hash;
      std::ifstream packed(git / "packed-refs");
      for (std::string line; std::getline(packed, line);) {
        if (line.size() > 41 && line.compare(41, std::string::npos, ref) == 0) return line.substr(0, 40);
      }
      return "";  // a branch with no commit yet
    }
    if (at == at.root_path()) break;
  }
  return "";
}

}  // namespace trainscope
