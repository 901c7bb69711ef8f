// The tests' PostgreSQL: one server per test process, started on first use by
// scripts/test-postgres.sh (initdb into a fresh directory, loopback, a free port) and stopped
// when the process exits. TRAINSCOPE_TEST_POSTGRES=URL uses a server already running instead.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace trainscope::testing {

inline std::string RunTestPostgresScript(const std::string& command, const std::string& dir) {
  const std::string line = std::string(TRAINSCOPE_SOURCE_DIR) + "/scripts/test-postgres.sh " + command + " " + dir;
  FILE* pipe = ::popen(line.c_str(), "r");
  if (!pipe) return {};
  std::string out;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe)) out += buffer;
  const int rc = ::pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return rc == 0 ? out : std::string();
}

// The URL of the test database (postgresql://...); throws if no server could be started.
inline const std::string& TestDatabaseUrl() {
  static const std::string url = [] {
    if (const char* given = std::getenv("TRAINSCOPE_TEST_POSTGRES"); given && *given) return std::string(given);
    // Directly under /tmp: a server run as the postgres user (tests as root) must reach it.
    static const std::string dir = "/tmp/trainscope-test-pg-" + std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    std::string started = RunTestPostgresScript("start", dir);
    if (started.empty()) throw std::runtime_error("cannot start the test PostgreSQL (scripts/test-postgres.sh start " + dir + ")");
    std::atexit([] {
      RunTestPostgresScript("stop", dir);
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    });
    return started;
  }();
  return url;
}

}  // namespace trainscope::testing
