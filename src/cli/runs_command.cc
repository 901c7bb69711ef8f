// `trainscope runs LOGDIR` and `trainscope show RUN`.
#include <fmt/format.h>

#include <cmath>
#include <ctime>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/rank_groups.h"
#include "store/run_io.h"
#include "store/run_store.h"

namespace trainscope::cli {

namespace {

std::string FormatTime(double unix_seconds) {
  if (unix_seconds <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm local{};
  localtime_r(&t, &local);
  char out[32];
  std::strftime(out, sizeof(out), "%Y-%m-%d %H:%M:%S", &local);
  return out;
}

std::string FormatDuration(double seconds) {
  if (seconds < 0) return "-";
  if (seconds < 120) return fmt::format("{:.1f}s", seconds);
  if (seconds < 7200) return fmt::format("{:.1f}m", seconds / 60);
  return fmt::format("{:.1f}h", seconds / 3600);
}

// The steps a store fault cost the run (meta "gaps": [[first, last, cause], ...]), as
// "steps 2692-19948 lost points (disk full)"; empty if none.
std::string DescribeGaps(const RunMeta& meta) {
  auto it = meta.extra.find("gaps");
  if (it == meta.extra.end()) return {};
  const nlohmann::json gaps = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!gaps.is_array() || gaps.empty()) return {};
  std::string text;
  for (const auto& g : gaps) {
    if (!g.is_array() || g.size() != 3 || !g[0].is_number_integer() || !g[1].is_number_integer() || !g[2].is_string()) {
      return "gaps: unreadable meta (" + it->second.substr(0, 80) + ")";
    }
    text += (text.empty() ? "steps " : ", ") + fmt::format("{}-{} ({})", g[0].get<int64_t>(), g[1].get<int64_t>(),
                                                           g[2].get<std::string>());
  }
  return text + " lost points";
}

int ListRunsCommand(const std::string& logdir) {
  std::vector<RunEntry> runs;
  Status s = ListRuns(logdir, &runs);
  if (!s.ok()) {
    fmt::print(stderr, "trainscope runs: {}\n", s.message());
    return 2;
  }
  if (runs.empty()) {
    fmt::print(stderr, "trainscope runs: {}: no runs here (a run is a directory holding {})\n", logdir,
               kStoreFileName);
    return 0;
  }
  fmt::print("{:<32} {:<9} {:>8} {:>7} {:<19} {:>8}\n", "RUN", "STATUS", "STEPS", "SERIES", "STARTED", "DURATION");
  struct Row {
    bool ok = false;
    std::string error, status, note;
    int64_t steps = 0;
    size_t series = 0;
    double start = 0, end = 0;
  };
  auto read = [](const RunEntry& run) {
    Row row;
    std::unique_ptr<RunStore> store;
    Status s = RunStore::OpenReadOnly(run.dir, &store);
    RunMeta meta;
    std::vector<SeriesInfo> series;
    if (s.ok()) s = store->ReadMeta(&meta);
    if (s.ok()) s = store->ListSeries(&series);
    if (s.ok() && !store->MaxStep(&row.steps).ok()) {
      // A damaged page under the step index: the series' own ranges (the check below says damaged).
      for (const SeriesInfo& info : series) row.steps = std::max(row.steps, info.points ? info.last_step : 0);
    }
    if (!s.ok()) {
      row.error = s.message();
      return row;
    }
    row.ok = true;
    row.status = store->EffectiveStatus(meta);
    row.series = series.size();
    row.start = meta.start_time;
    row.end = meta.end_time > 0 ? meta.end_time : meta.heartbeat;
    row.note = DescribeGaps(meta);
    // A whole read, as diagnose's, so that a damaged store is not listed as whole.
    DamageLog damage;
    if (Status checked = CheckRun(run.dir, &damage); !checked.ok()) {
      row.note += (row.note.empty() ? "" : "; ") + std::string("not read through: ") + checked.message();
    } else if (damage.count()) {
      row.note += (row.note.empty() ? "" : "; ") + std::string("damaged: ") + std::to_string(damage.count()) +
                  " records skipped";
    }
    return row;
  };
  auto print = [](const std::string& name, const Row& row) {
    if (!row.ok) {
      fmt::print("{:<32} {:<9} {}\n", name, "unreadable", row.error);
      return;
    }
    fmt::print("{:<32} {:<9} {:>8} {:>7} {:<19} {:>8}{}\n", name, row.status, row.steps, row.series,
               FormatTime(row.start), row.start > 0 && row.end > 0 ? FormatDuration(row.end - row.start) : "-",
               row.note.empty() ? std::string() : "  " + row.note);
  };
  std::vector<std::string> dirs;
  for (const RunEntry& run : runs) dirs.push_back(run.name);
  for (const RunGroup& group : GroupByRun(dirs)) {
    if (!group.distributed()) {
      print(runs[group.members[0]].name, read(runs[group.members[0]]));
      continue;
    }
    // A data-parallel run: one line for the run (its worst status: a crashed rank makes the
    // run crashed; the most steps; the earliest start), then one per rank.
    std::vector<Row> rows;
    Row total;
    total.ok = true;
    auto rank_of = [](const std::string& status) {
      return status == "crashed" ? 3 : status == "running" ? 2 : status == "finished" ? 0 : 1;
    };
    for (size_t i : group.members) {
      rows.push_back(read(runs[i]));
      const Row& r = rows.back();
      if (!r.ok) {
        total.status = "unreadable";
        continue;
      }
      if (total.status != "unreadable" && (total.status.empty() || rank_of(r.status) > rank_of(total.status))) {
        total.status = r.status;
      }
      total.steps = std::max(total.steps, r.steps);
      total.series = std::max(total.series, r.series);
      total.start = total.start == 0 ? r.start : std::min(total.start, r.start);
      total.end = std::max(total.end, r.end);
    }
    const std::string name = group.dir == "." ? logdir : group.dir;
    print(fmt::format("{} ({} ranks)", name, group.members.size()), total);
    for (size_t k = 0; k < group.members.size(); ++k) print("  rank-" + std::to_string(group.ranks[k]), rows[k]);
  }
  return 0;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.6g}", v);
}

int ShowRunCommand(const std::string& path) {
  std::unique_ptr<RunStore> store;
  Status s = RunStore::OpenReadOnly(path, &store);
  RunMeta meta;
  std::vector<SeriesInfo> series;
  std::vector<Finding> findings;
  if (s.ok()) s = store->ReadMeta(&meta);
  if (s.ok()) s = store->ListSeries(&series);
  if (s.ok()) s = store->ReadFindings(&findings);
  if (!s.ok()) {
    fmt::print(stderr, "trainscope show: {}\n", s.message());
    return 2;
  }
  // The listing reads summaries only; a whole read finds what diagnose would skip.
  DamageLog damage;
  const Status checked = CheckRun(path, &damage);
  const std::vector<std::string> damaged_series = damage.Series();
  fmt::print("run {}  status {}  host {}  started {}\n", meta.name, store->EffectiveStatus(meta), meta.host,
             FormatTime(meta.start_time));
  if (!checked.ok()) fmt::print("not read through: {}\n", checked.message());
  if (damage.count()) fmt::print("damaged: {}; the points below are what could be read\n", damage.Summary());
  if (!meta.git_commit.empty()) fmt::print("git {}\n", meta.git_commit);
  if (!meta.command_line.empty()) fmt::print("command {}\n", meta.command_line);
  fmt::print("config {}\n", meta.config_json);
  if (meta.dropped_points) {
    auto drops = meta.extra.find("drops");
    fmt::print("dropped points {}{}\n", meta.dropped_points, drops == meta.extra.end() ? std::string() : " " + drops->second);
  }
  const std::string gaps = DescribeGaps(meta);
  if (!gaps.empty()) fmt::print("{}\n", gaps);
  if (meta.backward_steps) fmt::print("points whose step went backwards {}\n", meta.backward_steps);
  fmt::print("\n{:<48} {:<12} {:>9} {:>10} {:>10} {:>14}\n", "SERIES", "KIND", "POINTS", "FIRST", "LAST",
             "LAST VALUE");
  for (const SeriesInfo& info : series) {
    const std::string last = info.kind == SeriesKind::kScalar        ? FormatValue(info.last_value)
                             : info.kind == SeriesKind::kTensorStats ? "|x|=" + FormatValue(info.last_value)
                                                                     : "-";
    const bool damaged = std::binary_search(damaged_series.begin(), damaged_series.end(), info.tag);
    fmt::print("{:<48} {:<12} {:>9} {:>10} {:>10} {:>14}{}\n", info.tag, SeriesKindName(info.kind), info.points,
               info.first_step, info.last_step, last, damaged ? "  damaged" : "");
  }
  if (!findings.empty()) fmt::print("\n{} findings recorded (trainscope diagnose {} for the report)\n", findings.size(), path);
  return 0;
}

}  // namespace

void AddRunsCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("runs", "List the runs of a logdir with status and step counts.");
  auto logdir = std::make_shared<std::string>();
  cmd->add_option("LOGDIR", *logdir, "Directory holding runs (each a directory with trainscope.db)")->required();
  cmd->callback([logdir, exit_code] { *exit_code = ListRunsCommand(*logdir); });
}

void AddShowCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("show", "Show a run: metadata, its series and their last values.");
  auto path = std::make_shared<std::string>();
  cmd->add_option("RUN", *path, "Run directory (or its trainscope.db)")->required();
  cmd->callback([path, exit_code] { *exit_code = ShowRunCommand(*path); });
}

}  // namespace trainscope::cli
