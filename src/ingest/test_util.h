// Helpers shared by the ingest tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace trainscope::ingest::testing {

inline std::string TestDataDir() {
#ifdef TRAINSCOPE_TESTDATA_DIR
  return TRAINSCOPE_TESTDATA_DIR;
#else
  return "";
#endif
}

// A fresh directory under the system temp dir, removed at destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ingest_test_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace trainscope::ingest::testing
