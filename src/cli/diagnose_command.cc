// `trainscope diagnose PATH [--json] [--fail-on SEVERITY]`: findings for a run, a logdir
// or a log file, as a human report (worst first) or as JSON (docs/doctor.md, Outputs).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/run_diagnosis.h"
#include "store/json_forms.h"

namespace trainscope::cli {

namespace {

using json = nlohmann::json;

// One finding, human-readable; `who` says which rank(s) it is about ("" for a plain run).
void PrintFinding(const Finding& f, const std::string& who) {
  fmt::print("  [{}] {} at step {}{}{}{}\n", SeverityName(f.severity), f.code, f.step,
             f.last_step != f.step ? fmt::format("-{}", f.last_step) : "",
             f.location.empty() ? "" : " in " + f.location, who);
  if (!f.summary.empty()) fmt::print("    {}\n", f.summary);
  // The evidence under its heading, one `key: value` a line, whole (the flight recorder's steps are for
  // --json and the report).
  json evidence = FindingToJson(f)["evidence"];
  evidence.erase("flight_recorder");
  if (!evidence.empty()) fmt::print("    evidence:\n");
  for (const auto& [key, value] : evidence.items()) {
    fmt::print("      {}: {}\n", key, value.is_string() ? value.get<std::string>() : value.dump());
  }
  for (const Cause& c : f.causes) fmt::print("    cause: {} ({:.0f}%)\n", c.id, c.confidence * 100);
  for (const std::string& a : f.actions) fmt::print("    do: {}\n", a);
}

// The layers' health scores on one line, worst first: the five lowest below 100, then how
// many are at 100 (doctor/layer_health.h says what a score is made of).
void PrintLayers(const std::vector<doctor::LayerHealth>& layers) {
  if (layers.empty()) return;
  std::vector<const doctor::LayerHealth*> worst;
  for (const auto& h : layers) {
    if (h.score < 100) worst.push_back(&h);
  }
  std::stable_sort(worst.begin(), worst.end(), [](auto* a, auto* b) { return a->score < b->score; });
  std::string line;
  for (size_t i = 0; i < worst.size() && i < 5; ++i) {
    line += fmt::format("{}{} {} ({})", i ? ", " : "", worst[i]->layer, worst[i]->score, worst[i]->worst);
  }
  if (worst.size() > 5) line += fmt::format(", {} more below 100", worst.size() - 5);
  const size_t healthy = layers.size() - worst.size();
  if (healthy) line += fmt::format("{}{} at 100", line.empty() ? "" : "; ", healthy == layers.size() ? "all " + std::to_string(healthy) : std::to_string(healthy));
  fmt::print("  layer health: {}\n", line);
}

void PrintHuman(const RunReport& d) {
  fmt::print("{} ({}, {} steps)\n", d.run->source, d.run->format, d.steps);
  if (d.findings.empty()) fmt::print("  no findings\n");
  // One action on top: the first of the worst finding's (findings come worst first, a
  // root before its consequences), for a reader who reads one line.
  if (const Finding* f = doctor::FirstAction(d.findings)) {
    fmt::print("  first: {} ({} at step {}{})\n", f->actions.front(), f->code, f->step,
               f->location.empty() ? "" : " in " + f->location);
  }
  PrintLayers(d.layers);
  for (const Finding& f : d.findings) PrintFinding(f, "");
  if (!d.not_checked.empty()) {
    fmt::print("  not checked, and why:\n");
    for (const auto& n : d.not_checked) fmt::print("    - {}: {}\n", n.check, n.reason);
  }
}

void PrintDistributed(const DistributedReport& dd) {
  int64_t steps = 0;
  for (const RunReport* d : dd.per_rank) steps = std::max(steps, d->steps);
  fmt::print("{} (trainscope, {} ranks, {} steps)\n", dd.dir, dd.ranks.size(), steps);
  for (size_t k = 0; k < dd.per_rank.size(); ++k) {
    const RunData& data = dd.per_rank[k]->run->data;
    const std::string reason = MetaText(data, "exit_reason");
    fmt::print("  rank {}: {}{}, {} steps\n", dd.ranks[k], MetaText(data, "status"),
               reason.empty() ? "" : " (" + reason + ")", dd.per_rank[k]->steps);
  }
  if (dd.findings.empty()) fmt::print("  no findings\n");
  for (const RankedFinding& f : dd.findings) {
    std::string who;
    if (f.rank >= 0) {
      who = fmt::format(" (rank {})", f.rank);
    } else if (!f.ranks.empty()) {
      who = " (ranks";
      for (int r : f.ranks) who += " " + std::to_string(r);
      who += ")";
    }
    PrintFinding(f.finding, who);
  }
  std::vector<std::string> seen;
  for (const RunReport* d : dd.per_rank) {
    for (const auto& n : d->not_checked) {
      if (std::find(seen.begin(), seen.end(), n.check) != seen.end()) continue;
      if (seen.empty()) fmt::print("  not checked, and why:\n");
      seen.push_back(n.check);
      fmt::print("    - {}: {}\n", n.check, n.reason);
    }
  }
}

int DiagnoseCommand(const std::string& path, bool as_json, const std::string& fail_on) {
  Severity threshold = Severity::kCritical;
  const bool has_threshold = !fail_on.empty();
  if (has_threshold && !ParseSeverity(fail_on, &threshold)) {
    fmt::print(stderr, "trainscope diagnose: --fail-on {}: expected info, warning or critical\n", fail_on);
    return 2;
  }
  PathReport report;
  Status s = DiagnosePath(path, &report);
  if (!s.ok()) {
    fmt::print(stderr, "trainscope diagnose: {}\n", s.message());
    return 2;
  }
  if (as_json) {
    fmt::print("{}\n", PathReportJson(report, path).dump(2));
  } else {
    for (size_t g = 0; g < report.groups.size(); ++g) {
      if (report.groups[g].distributed()) PrintDistributed(report.distributed[g]);
      else PrintHuman(report.reports[report.groups[g].members[0]]);
    }
  }
  if (has_threshold) {
    for (const RunReport& d : report.reports) {
      for (const Finding& f : d.findings) {
        if (f.severity >= threshold) return 1;
      }
    }
    for (const DistributedReport& dd : report.distributed) {
      for (const RankedFinding& f : dd.findings) {
        if (f.finding.severity >= threshold) return 1;
      }
    }
  }
  return 0;
}

}  // namespace

void AddDiagnoseCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("diagnose", "Say what went wrong in a run: findings, causes and actions.");
  struct Args {
    std::string path;
    bool json = false;
    std::string fail_on;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("PATH", args->path, "A run directory, a logdir of runs, or a log file")->required();
  cmd->add_flag("--json", args->json, "Print the findings as JSON (docs/doctor.md)");
  cmd->add_option("--fail-on", args->fail_on, "Exit with 1 if a finding is at least this severe (info|warning|critical)");
  cmd->callback([args, exit_code] { *exit_code = DiagnoseCommand(args->path, args->json, args->fail_on); });
}

}  // namespace trainscope::cli
