// `trainscope diagnose PATH [--json] [--fail-on SEVERITY]`: findings for a run, a logdir
// or a log file, as a human report (worst first) or as the JSON of DESIGN.md.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/source.h"
#include "doctor/doctor.h"
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

void PrintHuman(const Diagnosis& d) {
  fmt::print("{} ({}, {} steps)\n", d.run->source, d.run->format, d.run->data.MaxStep());
  if (d.findings.empty()) fmt::print("  no findings\n");
  for (const Finding& f : d.findings) {
    fmt::print("  [{}] {} at step {}{}{}\n", SeverityName(f.severity), f.code, f.step,
               f.last_step != f.step ? fmt::format("-{}", f.last_step) : "",
               f.location.empty() ? "" : " in " + f.location);
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
  if (!d.not_checked.empty()) {
    fmt::print("  not checked, and why:\n");
    for (const auto& n : d.not_checked) fmt::print("    - {}: {}\n", n.check, n.reason);
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
  if (as_json) {
    if (is_logdir) {
      json all = json::array();
      for (const Diagnosis& d : diagnoses) all.push_back(DiagnosisJson(d));
      fmt::print("{}\n", json({{"source", path}, {"format", "logdir"}, {"runs", all}}).dump(2));
    } else {
      fmt::print("{}\n", DiagnosisJson(diagnoses.front()).dump(2));
    }
  } else {
    for (const Diagnosis& d : diagnoses) PrintHuman(d);
  }
  if (has_threshold) {
    for (const Diagnosis& d : diagnoses) {
      for (const Finding& f : d.findings) {
        if (f.severity >= threshold) return 1;
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
