// The user's alert rules (rules.h) judged on a run while it is recorded, as a recorder
// observer (recorder/observer.h). The recorder ticks it every Recorder::kRuleTick with the
// newly queued points of the series a rule matches, long before they are committed, and at
// each commit with the rest. A rule that fires becomes a finding (USER_ALERT) stored with
// the run, its shell command is started (never waited for: neither the writer nor the
// training waits on a slow command), and the alert is posted for the training side, which
// takes it at a step boundary (Recorder::TakeAlerts) for print, callback, stop and pdb.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "doctor/rules.h"
#include "recorder/observer.h"

namespace trainscope::doctor {

class RuleObserver : public RecorderObserver {
 public:
  // From a rules file, or TOML text with the name to give it in errors. A bad rule is an
  // error naming the file and the line, before any run exists.
  static Status FromFile(const std::string& path, std::shared_ptr<RuleObserver>* out);
  static Status FromText(std::string_view toml_text, std::string_view origin, std::shared_ptr<RuleObserver>* out);
  explicit RuleObserver(std::vector<AlertRule> rules);

  size_t rule_count() const { return engine_.rules().size(); }

  Status OnOpen(const RunStart& run, ObserverHost& host) override;
  bool ticks() const override { return true; }
  bool Watches(std::string_view tag, SeriesKind kind) override;
  void OnTick(const TickPoints& points, std::vector<Finding>* findings) override;

 private:
  RuleEngine engine_;  // writer thread
  ObserverHost* host_ = nullptr;
};

// Starts the alert's shell command (`/bin/sh -c`, {rule} {series} {step} {value} replaced,
// TRAINSCOPE_ALERT_* in its environment) and returns at once; a detached thread waits for
// it and reports a failure on stderr.
void StartShellAction(const Alert& alert);

}  // namespace trainscope::doctor
