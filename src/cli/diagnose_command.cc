// `trainscope diagnose PATH [--json] [--fail-on SEVERITY]`: findings for a run, a logdir
// or a log file, as a human report (worst first) or as the JSON of DESIGN.md.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/rank_groups.h"
#include "cli/source.h"
#include "doctor/doctor.h"
#include "doctor/ranks.h"
#include "store/json_forms.h"

namespace trainscope::cli {

namespace {

using json = nlohmann::json;

struct Diagnosis {
  const LoadedRun* run;
  std::vector<Finding> findings;  // worst first, then by step
  std::vector<doctor::NotChecked> not_checked;
};

// The doctor over the whole run (offline), merged with the findings recorded with it (the
// online doctor's, the watch() checks'): one per code and location, worst first.
Diagnosis Diagnose(const LoadedRun& run) {
  doctor::Diagnosis d = doctor::Diagnose(run.data);
  return {&run, std::move(d.findings), std::move(d.not_checked)};
}

json DiagnosisJson(const Diagnosis& d) {
  json findings = json::array();
  for (const Finding& f : d.findings) findings.push_back(FindingToJson(f));
  json not_checked = json::array();
  for (const auto& n : d.not_checked) {
    not_checked.push_back({{"check", n.check}, {"codes", n.codes}, {"reason", n.reason}});
  }
  return {{"source", d.run->source},
          {"format", d.run->format},
          {"steps", d.run->data.MaxStep()},
          {"findings", findings},
          {"not_checked", not_checked}};
}

// One finding, human-readable; `who` says which rank(s) it is about ("" for a plain run).
void PrintFinding(const Finding& f, const std::string& who) {
  fmt::print("  [{}] {} at step {}{}{}{}\n", SeverityName(f.severity), f.code, f.step,
             f.last_step != f.step ? fmt::format("-{}", f.last_step) : "",
             f.location.empty() ? "" : " in " + f.location, who);
  if (!f.summary.empty()) fmt::print("    {}\n", f.summary);
  // The evidence in one line (the flight recorder's steps are for --json and the report).
  json evidence = FindingToJson(f)["evidence"];
  evidence.erase("flight_recorder");
  std::string line = evidence.dump();
  if (line.size() > 200) line = line.substr(0, 197) + "...";
  if (evidence.size()) fmt::print("    evidence: {}\n", line);
  for (const Cause& c : f.causes) fmt::print("    cause: {} ({:.0f}%)\n", c.id, c.confidence * 100);
  for (const std::string& a : f.actions) fmt::print("    do: {}\n", a);
}

void PrintHuman(const Diagnosis& d) {
  fmt::print("{} ({}, {} steps)\n", d.run->source, d.run->format, d.run->data.MaxStep());
  if (d.findings.empty()) fmt::print("  no findings\n");
  for (const Finding& f : d.findings) PrintFinding(f, "");
  if (!d.not_checked.empty()) {
    fmt::print("  not checked, and why:\n");
    for (const auto& n : d.not_checked) fmt::print("    - {}: {}\n", n.check, n.reason);
  }
}

// A data-parallel run: its ranks' stores (<run>/rank-<r>/) judged one by one, then side by
// side (doctor/ranks.h). Every finding says which rank it is about.
struct RankedFinding {
  Finding finding;
  int rank = -1;           // -1: about several ranks (or none in particular)
  std::vector<int> ranks;  // set for the comparisons of ranks
  bool compared = false;   // from comparing the ranks (has "ranks" in JSON)
};

struct DistributedDiagnosis {
  std::string dir;
  std::vector<int> ranks;
  std::vector<const Diagnosis*> per_rank;  // by rank
  std::vector<RankedFinding> findings;     // worst first, then by step and rank
};

int64_t MetaInt(const RunData& data, const char* key, int64_t fallback) {
  auto it = data.meta.find(key);
  if (it == data.meta.end()) return fallback;
  try {
    return std::stoll(it->second);
  } catch (...) {
    return fallback;
  }
}

std::string MetaText(const RunData& data, const char* key) {
  auto it = data.meta.find(key);
  return it == data.meta.end() ? "" : it->second;
}

DistributedDiagnosis DiagnoseRanks(const RunGroup& group, const std::vector<Diagnosis>& diagnoses) {
  DistributedDiagnosis dd{group.dir, group.ranks, {}, {}};
  std::vector<doctor::RankRun> ranks;
  for (size_t k = 0; k < group.members.size(); ++k) {
    const Diagnosis& d = diagnoses[group.members[k]];
    dd.per_rank.push_back(&d);
    ranks.push_back({group.ranks[k], &d.run->data});
    for (const Finding& f : d.findings) dd.findings.push_back({f, group.ranks[k], {}, false});
  }
  for (doctor::RankFinding& f : doctor::CompareRanks(ranks)) {
    dd.findings.push_back({std::move(f.finding), f.rank, std::move(f.ranks), true});
  }
  std::stable_sort(dd.findings.begin(), dd.findings.end(), [](const RankedFinding& a, const RankedFinding& b) {
    if (a.finding.severity != b.finding.severity) return a.finding.severity > b.finding.severity;
    if (a.finding.step != b.finding.step) return a.finding.step < b.finding.step;
    return a.rank < b.rank;
  });
  return dd;
}

json DistributedJson(const DistributedDiagnosis& dd) {
  json ranks = json::array();
  int64_t steps = 0, world_size = 0;
  std::vector<int> missing;
  for (size_t k = 0; k < dd.per_rank.size(); ++k) {
    const LoadedRun& run = *dd.per_rank[k]->run;
    steps = std::max(steps, run.data.MaxStep());
    world_size = std::max(world_size, MetaInt(run.data, "world_size", 0));
    json r = {{"rank", dd.ranks[k]}, {"source", run.source}, {"status", MetaText(run.data, "status")},
              {"steps", run.data.MaxStep()}};
    if (!MetaText(run.data, "exit_reason").empty()) r["exit_reason"] = MetaText(run.data, "exit_reason");
    ranks.push_back(r);
  }
  for (int r = 0; r < world_size; ++r) {
    if (std::find(dd.ranks.begin(), dd.ranks.end(), r) == dd.ranks.end()) missing.push_back(r);
  }
  json findings = json::array();
  for (const RankedFinding& f : dd.findings) {
    json j = FindingToJson(f.finding);
    j["rank"] = f.rank >= 0 ? json(f.rank) : json(nullptr);
    if (f.compared) j["ranks"] = f.ranks;
    findings.push_back(std::move(j));
  }
  // What could not be checked: once per check, with the ranks it applies to.
  json not_checked = json::array();
  std::vector<std::string> seen;
  for (size_t k = 0; k < dd.per_rank.size(); ++k) {
    for (const auto& n : dd.per_rank[k]->not_checked) {
      auto it = std::find(seen.begin(), seen.end(), n.check);
      if (it != seen.end()) {
        not_checked[it - seen.begin()]["ranks"].push_back(dd.ranks[k]);
        continue;
      }
      seen.push_back(n.check);
      not_checked.push_back({{"check", n.check}, {"codes", n.codes}, {"reason", n.reason}, {"ranks", {dd.ranks[k]}}});
    }
  }
  json out = {{"source", dd.dir},   {"format", "trainscope"}, {"steps", steps},
              {"world_size", std::max<int64_t>(world_size, static_cast<int64_t>(dd.ranks.size()))},
              {"ranks", ranks},     {"findings", findings},   {"not_checked", not_checked}};
  if (!missing.empty()) out["missing_ranks"] = missing;
  return out;
}

void PrintDistributed(const DistributedDiagnosis& dd) {
  int64_t steps = 0;
  for (const Diagnosis* d : dd.per_rank) steps = std::max(steps, d->run->data.MaxStep());
  fmt::print("{} (trainscope, {} ranks, {} steps)\n", dd.dir, dd.ranks.size(), steps);
  for (size_t k = 0; k < dd.per_rank.size(); ++k) {
    const RunData& data = dd.per_rank[k]->run->data;
    const std::string reason = MetaText(data, "exit_reason");
    fmt::print("  rank {}: {}{}, {} steps\n", dd.ranks[k], MetaText(data, "status"),
               reason.empty() ? "" : " (" + reason + ")", data.MaxStep());
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
  for (const Diagnosis* d : dd.per_rank) {
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
  std::vector<LoadedRun> runs;
  bool is_logdir = false;
  Status s = LoadSources(path, &runs, &is_logdir);
  if (!s.ok()) {
    fmt::print(stderr, "trainscope diagnose: {}\n", s.message());
    return 2;
  }
  std::vector<Diagnosis> diagnoses;
  for (const LoadedRun& run : runs) diagnoses.push_back(Diagnose(run));
  // The ranks of a data-parallel run (rank-<r>/ under one run directory) go together.
  std::vector<RunGroup> groups;
  if (is_logdir) {
    std::vector<std::string> dirs;
    for (const LoadedRun& run : runs) dirs.push_back(run.source);
    groups = GroupByRun(dirs);
  } else {
    groups.push_back({runs.front().source, {0}, {}});
  }
  std::vector<DistributedDiagnosis> distributed(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].distributed()) distributed[g] = DiagnoseRanks(groups[g], diagnoses);
  }
  // PATH is one data-parallel run: one object, as for a single run.
  const bool one_distributed_run = groups.size() == 1 && groups[0].distributed() && SameDirectory(groups[0].dir, path);
  if (as_json) {
    if (one_distributed_run) {
      fmt::print("{}\n", DistributedJson(distributed[0]).dump(2));
    } else if (is_logdir) {
      json all = json::array();
      for (size_t g = 0; g < groups.size(); ++g) {
        all.push_back(groups[g].distributed() ? DistributedJson(distributed[g])
                                              : DiagnosisJson(diagnoses[groups[g].members[0]]));
      }
      fmt::print("{}\n", json({{"source", path}, {"format", "logdir"}, {"runs", all}}).dump(2));
    } else {
      fmt::print("{}\n", DiagnosisJson(diagnoses.front()).dump(2));
    }
  } else {
    for (size_t g = 0; g < groups.size(); ++g) {
      if (groups[g].distributed()) PrintDistributed(distributed[g]);
      else PrintHuman(diagnoses[groups[g].members[0]]);
    }
  }
  if (has_threshold) {
    for (const Diagnosis& d : diagnoses) {
      for (const Finding& f : d.findings) {
        if (f.severity >= threshold) return 1;
      }
    }
    for (const DistributedDiagnosis& dd : distributed) {
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
  cmd->add_flag("--json", args->json, "Print the findings as JSON (DESIGN.md)");
  cmd->add_option("--fail-on", args->fail_on, "Exit with 1 if a finding is at least this severe (info|warning|critical)");
  cmd->callback([args, exit_code] { *exit_code = DiagnoseCommand(args->path, args->json, args->fail_on); });
}

}  // namespace trainscope::cli
