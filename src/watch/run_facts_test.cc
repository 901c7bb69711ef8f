#include "watch/run_facts.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace trainscope {
namespace {

namespace fs = std::filesystem;

TEST(GitCommit, ReadsHeadWithoutGit) {
  const fs::path repo = fs::temp_directory_path() / ("ts_git_" + std::to_string(::getpid()));
  fs::remove_all(repo);
  fs::create_directories(repo / ".git" / "refs" / "heads");
  fs::create_directories(repo / "sub");
  std::ofstream(repo / ".git" / "HEAD") << "ref: refs/heads/main\n";
  std::ofstream(repo / ".git" / "refs" / "heads" / "main") << "0123456789abcdef0123456789abcdef01234567\n";
  EXPECT_EQ(GitCommit((repo / "sub").string()), "0123456789abcdef0123456789abcdef01234567");
  fs::remove(repo / ".git" / "refs" / "heads" / "main");
  std::ofstream(repo / ".git" / "packed-refs") << "# pack-refs\nfedcba9876543210fedcba9876543210fedcba98 refs/heads/main\n";
  EXPECT_EQ(GitCommit(repo.string()), "fedcba9876543210fedcba9876543210fedcba98");
  fs::remove_all(repo);
}

}  // namespace
}  // namespace trainscope
