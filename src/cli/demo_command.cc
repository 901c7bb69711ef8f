// `trainscope demo`: a real small PyTorch training, recorded by trainscope, then listed.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"

#ifndef TRAINSCOPE_PYTHON_EXECUTABLE
#define TRAINSCOPE_PYTHON_EXECUTABLE "python3"
#endif

namespace trainscope::cli {

namespace fs = std::filesystem;

std::string ExecutableDir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

namespace {

int RunDemo(const std::string& logdir, int steps) {
  // The Python package sits beside the binary in a build tree (build/python); an installed
  // package is found by the interpreter itself.
  const fs::path package_dir = fs::path(ExecutableDir()) / "python";
  if (fs::exists(package_dir / "trainscope" / "__init__.py")) {
    const char* old = std::getenv("PYTHONPATH");
    const std::string path = package_dir.string() + (old && *old ? std::string(":") + old : "");
    setenv("PYTHONPATH", path.c_str(), 1);
  }
  const char* env_python = std::getenv("TRAINSCOPE_PYTHON");
  const std::string python = env_python && *env_python ? env_python : TRAINSCOPE_PYTHON_EXECUTABLE;
  const std::string steps_text = std::to_string(steps);
  fmt::print("trainscope demo: training a small PyTorch model with {} ({} steps), recording into {}\n", python,
             steps, logdir);
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    execlp(python.c_str(), python.c_str(), "-m", "trainscope.demo", "--logdir", logdir.c_str(), "--steps",
           steps_text.c_str(), static_cast<char*>(nullptr));
    fmt::print(stderr, "trainscope demo: cannot run {}: {}\n", python, std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fmt::print(stderr, "trainscope demo: the training script failed (set TRAINSCOPE_PYTHON to a python3 with torch)\n");
    return 2;
  }
  fmt::print("\n$ trainscope runs {}\n", logdir);
  std::fflush(stdout);
  const std::string self = (fs::path(ExecutableDir()) / "trainscope").string();
  const pid_t lister = fork();
  if (lister == 0) {
    execl("/proc/self/exe", self.c_str(), "runs", logdir.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  waitpid(lister, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

}  // namespace

void AddDemoCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("demo", "Train a small PyTorch model, record it, and list the runs.");
  auto logdir = std::make_shared<std::string>("runs");
  auto steps = std::make_shared<int>(300);
  cmd->add_option("--logdir", *logdir, "Where to record the run")->capture_default_str();
  cmd->add_option("--steps", *steps, "Training steps")->capture_default_str();
  cmd->callback([logdir, steps, exit_code] { *exit_code = RunDemo(*logdir, *steps); });
}

}  // namespace trainscope::cli
