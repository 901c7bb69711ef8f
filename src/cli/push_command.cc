// `trainscope push RUN --to URL --project P [--name N]`: a finished local run (or each run of
// a logdir) into a team's store: to a server (http[s]://host:port, token from --token or
// TRAINSCOPE_TOKEN) through its ingest API, from where the server says the run is (a run a
// rank forwarded in part is completed, nothing sent twice); or copied straight into a
// database (postgresql://host[:port]/database). docs/server.md.
#include <fmt/format.h>

#include <filesystem>

#include "cli/commands.h"
#ifdef TRAINSCOPE_WITH_FORWARD
#include "forward/forwarder.h"
#endif
#include "store/run_io.h"
#include "store/run_store.h"

namespace trainscope::cli {

namespace {

namespace fs = std::filesystem;

bool IsServerUrl(const std::string& to) { return to.rfind("http://", 0) == 0 || to.rfind("https://", 0) == 0; }

int SendOne(const std::string& run_dir, const std::string& server, const std::string& token,
            const std::string& project, const std::string& name) {
#ifdef TRAINSCOPE_WITH_FORWARD
  ForwardStats stats;
  const std::string db = fs::is_directory(run_dir) ? (fs::path(run_dir) / kStoreFileName).string() : run_dir;
  Status s = ForwardOnce(db, {server, token, project, name}, /*close=*/true, &stats);
  if (!s.ok()) {
    fmt::print(stderr, "trainscope push: {}: {}\n", run_dir, s.message());
    return 2;
  }
  fmt::print("{} -> {} {}/{}: {} points, {} rows in {} batches\n", run_dir, server, project, name, stats.points,
             stats.rows, stats.batches);
  return 0;
#else
  fmt::print(stderr, "trainscope push: sending to a server needs the server part, which this build leaves out\n");
  return 2;
#endif
}

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

int PushCommand(const std::string& path, const std::string& to, const std::string& project, const std::string& name,
                std::string token) {
  const bool server = IsServerUrl(to);
  if (!server && (!IsDatabaseLocation(to) || to.find('#') != std::string::npos)) {
    fmt::print(stderr,
               "trainscope push: --to {}: expected a server, http[s]://host:port, or a database, "
               "postgresql://host[:port]/database\n",
               to);
    return 2;
  }
  if (server && token.empty()) {
    const char* env = std::getenv("TRAINSCOPE_TOKEN");
    token = env ? env : "";
  }
  if (project.empty() || project.find('/') != std::string::npos) {
    fmt::print(stderr, "trainscope push: --project '{}': expected a project name without '/'\n", project);
    return 2;
  }
  std::error_code ec;
  const std::string base = to + "#" + project + "/";
  if (fs::exists(fs::path(path) / kStoreFileName, ec) || fs::is_regular_file(path, ec)) {
    std::string run_name = name.empty() ? fs::path(path).lexically_normal().filename().string() : name;
    if (run_name == kStoreFileName) run_name = fs::path(path).lexically_normal().parent_path().filename().string();
    return server ? SendOne(path, to, token, project, run_name) : PushOne(path, base + run_name);
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
    const std::string run_name = name.empty() ? run.name : name + "/" + run.name;
    worst = std::max(worst, server ? SendOne(run.dir, to, token, project, run_name) : PushOne(run.dir, base + run_name));
  }
  return worst;
}

}  // namespace

void AddPushCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("push", "Copy a finished run, or every run of a logdir, into a team's database.");
  struct Args {
    std::string path, to, project, name, token;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("RUN", args->path, "A run directory, its trainscope.db, or a logdir of runs")->required();
  cmd->add_option("--to", args->to, "A server, http[s]://host:port, or a database, postgresql://[user@]host[:port]/database")
      ->required();
  cmd->add_option("--token", args->token, "A server's token with write scope on the project (default TRAINSCOPE_TOKEN)");
  cmd->add_option("--project", args->project, "The project the runs go under")->required();
  cmd->add_option("--name", args->name, "The run's name there (default: its directory's name; for a logdir, a prefix)");
  cmd->callback(
      [args, exit_code] { *exit_code = PushCommand(args->path, args->to, args->project, args->name, args->token); });
}

}  // namespace trainscope::cli
