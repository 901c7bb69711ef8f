// `trainscope push RUN --to postgresql://host[:port]/database --project P [--name N]`: copies a
// finished local run (or each run of a logdir) into a team's database, where `diagnose`,
// `report` and the server read it as they read the file (docs/server.md).
#include <fmt/format.h>

#include <filesystem>

#include "cli/commands.h"
#include "store/run_io.h"
#include "store/run_store.h"

namespace trainscope::cli {

namespace {

namespace fs = std::filesystem;

int PushOne(const std::string& run_dir, const std::string& target) {
  std::unique_ptr<RunStore> from;
  Status s = RunStore::OpenReadOnly(run_dir, &from);
  RunMeta meta;
  if (s.ok()) s = from->ReadMeta(&meta);
  std::unique_ptr<RunStore> to;
  if (s.ok()) s = RunStore::Create(target, meta, &to);
  if (s.ok()) s = CopyRun(*from, to.get());
  if (!s.ok()) {
    fmt::print(stderr, "trainscope push: {}\n", s.message());
    return 2;
  }
  if (from->damage().count()) fmt::print(stderr, "warning: {}: {}\n", run_dir, from->damage().Summary());
  fmt::print("{} -> {}\n", run_dir, to->path());
  return 0;
}

int PushCommand(const std::string& path, const std::string& to, const std::string& project, const std::string& name) {
  if (!IsDatabaseLocation(to) || to.find('#') != std::string::npos) {
    fmt::print(stderr, "trainscope push: --to {}: expected a database, postgresql://host[:port]/database\n", to);
    return 2;
  }
  if (project.empty() || project.find('/') != std::string::npos) {
    fmt::print(stderr, "trainscope push: --project '{}': expected a project name without '/'\n", project);
    return 2;
  }
  std::error_code ec;
  const std::string base = to + "#" + project + "/";
  if (fs::exists(fs::path(path) / kStoreFileName, ec) || fs::is_regular_file(path, ec)) {
    const std::string run_name = name.empty() ? fs::path(path).lexically_normal().filename().string() : name;
    return PushOne(path, base + run_name);
  }
  std::vector<RunEntry> runs;
  Status s = ListRuns(path, &runs);
  if (s.ok() && runs.empty()) s = Status::NotFound(path + ": no trainscope runs here (import another tool's log with "
                                                   "`trainscope import SRC -o postgresql://...#project/run`)");
  if (!s.ok()) {
    fmt::print(stderr, "trainscope push: {}\n", s.message());
    return 2;
  }
  int worst = 0;
  for (const RunEntry& run : runs) {
    worst = std::max(worst, PushOne(run.dir, base + (name.empty() ? run.name : name + "/" + run.name)));
  }
  return worst;
}

}  // namespace

void AddPushCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("push", "Copy a finished run, or every run of a logdir, into a team's database.");
  struct Args {
    std::string path, to, project, name;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("RUN", args->path, "A run directory, its trainscope.db, or a logdir of runs")->required();
  cmd->add_option("--to", args->to, "The database: postgresql://[user@]host[:port]/database")->required();
  cmd->add_option("--project", args->project, "The project the runs go under")->required();
  cmd->add_option("--name", args->name, "The run's name there (default: its directory's name; for a logdir, a prefix)");
  cmd->callback([args, exit_code] { *exit_code = PushCommand(args->path, args->to, args->project, args->name); });
}

}  // namespace trainscope::cli
