// `trainscope export RUN --to tfevents [-o DIR]`: writes a run (or anything `diagnose`
// reads) as a TensorBoard event file, so it opens in TensorBoard.
#include <fmt/format.h>

#include <filesystem>

#include "cli/commands.h"
#include "cli/source.h"
#include "ingest/tfevents_writer.h"

namespace trainscope::cli {

namespace {

namespace fs = std::filesystem;

int ExportCommand(const std::string& path, const std::string& to, std::string out) {
  if (to != "tfevents") {
    fmt::print(stderr, "trainscope export: --to {}: expected tfevents\n", to);
    return 2;
  }
  std::vector<LoadedRun> runs;
  bool is_logdir = false;
  Status s = LoadSources(path, &runs, &is_logdir);
  if (!s.ok()) {
    fmt::print(stderr, "trainscope export: {}\n", s.message());
    return 2;
  }
  std::error_code ec;
  if (out.empty()) {
    if (!fs::is_directory(path, ec)) {
      fmt::print(stderr, "trainscope export: {} is a file; say where to write with -o DIR\n", path);
      return 2;
    }
    out = (fs::path(path) / "tfevents").string();
  }
  for (const LoadedRun& run : runs) {
    std::string dir = out;
    if (is_logdir) {
      std::string rel = fs::relative(run.source, path, ec).string();
      if (ec || rel.empty() || rel.rfind("..", 0) == 0) rel = fs::path(run.source).filename().string();
      dir = (fs::path(out) / rel).string();
    }
    std::string file;
    uint64_t events = 0;
    s = ingest::ExportRunToTfEvents(run.data, dir, &file, &events);
    if (!s.ok()) {
      fmt::print(stderr, "trainscope export: {}\n", s.message());
      return 2;
    }
    fmt::print("{} -> {} ({} events)\n", run.source, file, events);
  }
  return 0;
}

}  // namespace

void AddExportCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("export", "Write a run in another tool's format (TensorBoard event files).");
  struct Args {
    std::string path, to = "tfevents", out;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("RUN", args->path, "A run directory, a logdir of runs, or any file diagnose reads")->required();
  cmd->add_option("--to", args->to, "Output format: tfevents")->default_val("tfevents");
  cmd->add_option("-o,--out", args->out, "Directory for the event files (default: RUN/tfevents)");
  cmd->callback([args, exit_code] { *exit_code = ExportCommand(args->path, args->to, args->out); });
}

}  // namespace trainscope::cli
