#include "doctor/rule_observer.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "recorder/recorder.h"

extern char** environ;

namespace trainscope::doctor {

namespace {

std::string ReplaceAll(std::string text, std::string_view from, const std::string& to) {
  for (size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size()) text.replace(at, from.size(), to);
  return text;
}

}  // namespace

// An alert's shell command runs as `/bin/sh -c`, started with posix_spawn and its own
// environment (the process's plus TRAINSCOPE_ALERT_*): no setenv, which is unsafe while
// other threads read the environment. A detached thread waits for it, so neither the
// writer nor the training ever waits on a slow command; a failure is reported on stderr.
void StartShellAction(const Alert& alert) {
  char value[32];
  std::snprintf(value, sizeof(value), "%.6g", alert.value);
  std::string command = ReplaceAll(alert.shell, "{rule}", alert.rule);
  command = ReplaceAll(command, "{series}", alert.series);
  command = ReplaceAll(command, "{step}", std::to_string(alert.step));
  command = ReplaceAll(command, "{value}", value);
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "TRAINSCOPE_ALERT_", 17) != 0) env.emplace_back(*e);
  }
  env.push_back("TRAINSCOPE_ALERT_RULE=" + alert.rule);
  env.push_back("TRAINSCOPE_ALERT_SERIES=" + alert.series);
  env.push_back("TRAINSCOPE_ALERT_STEP=" + std::to_string(alert.step));
  env.push_back(std::string("TRAINSCOPE_ALERT_VALUE=") + value);
  env.push_back(std::string("TRAINSCOPE_ALERT_SEVERITY=") + SeverityName(alert.severity));
  std::thread([command = std::move(command), env = std::move(env), rule = alert.rule] {
    std::vector<char*> envp;
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    char* argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"), const_cast<char*>(command.c_str()), nullptr};
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv, envp.data());
    if (rc != 0) {
      std::fprintf(stderr, "trainscope: alert '%s': cannot run its shell command (%s)\n", rule.c_str(), std::strerror(rc));
      return;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "trainscope: alert '%s': its shell command failed (%s %d)\n", rule.c_str(),
                   WIFEXITED(status) ? "exit status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
  }).detach();
}

Status RuleObserver::FromFile(const std::string& path, std::shared_ptr<RuleObserver>* out) {
  std::vector<AlertRule> rules;
  Status s = LoadRulesFile(path, &rules);
  if (!s.ok()) return s;
  *out = std::make_shared<RuleObserver>(std::move(rules));
  return Status::Ok();
}

Status RuleObserver::FromText(std::string_view toml_text, std::string_view origin,
                              std::shared_ptr<RuleObserver>* out) {
  std::vector<AlertRule> rules;
  Status s = ParseRules(toml_text, origin, &rules);
  if (!s.ok()) return s;
  *out = std::make_shared<RuleObserver>(std::move(rules));
  return Status::Ok();
}

RuleObserver::RuleObserver(std::vector<AlertRule> rules) : engine_(std::move(rules)) {}

Status RuleObserver::OnOpen(const RunStart& run, ObserverHost& host) {
  host_ = &host;
  return Status::Ok();
}

bool RuleObserver::Watches(std::string_view tag, SeriesKind kind) {
  for (const AlertRule& rule : engine_.rules()) {
    if (SeriesMatches(rule.series, tag)) return true;
  }
  return false;
}

void RuleObserver::OnTick(const TickPoints& points, std::vector<Finding>* findings) {
  for (const auto& p : points.scalars) engine_.OnScalar(points.tags[p.series_id], p.step, p.wall_time, p.value);
  for (const auto& p : points.tensor_stats) {
    engine_.OnTensorStats(points.tags[p.series_id], p.step, p.wall_time, p.stats);
  }
  for (Alert& a : engine_.TakeAlerts()) {
    findings->push_back(AlertToFinding(a));
    if (!a.shell.empty()) StartShellAction(a);
    host_->PostAlert({std::move(a.rule), std::move(a.series), a.severity, a.step, a.value, std::move(a.message),
                      std::move(a.actions), std::move(a.callback), std::move(a.shell)});
  }
}

}  // namespace trainscope::doctor
