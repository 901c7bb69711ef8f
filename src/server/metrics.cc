// /metrics: the runs a token may read, in OpenMetrics text (docs/server.md "Metrics").
#include <chrono>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "server/access.h"
#include "server/api.h"

namespace trainscope::server {

using json = nlohmann::json;

namespace {

// A label value in OpenMetrics text: backslash, double quote and newline escaped.
std::string Label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string Sample(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", v);
  return text;
}

}  // namespace

std::string Api::Metrics(const ProjectFilter* readable) {
  const json runs = json::parse(Runs(readable).body, nullptr, false);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    std::string samples;
  };
  Family info{"trainscope_run", "info", "A run the server holds, with its status.", ""};
  Family step{"trainscope_run_step", "gauge", "The largest step the run has recorded.", ""};
  Family speed{"trainscope_run_steps_per_second", "gauge", "Steps per second, averaged over the run so far.", ""};
  Family findings{"trainscope_run_findings", "gauge", "The run's findings by severity.", ""};
  Family lag{"trainscope_run_last_write_age_seconds", "gauge",
             "Seconds since the run's last write reached the store: a running run's ingest lag.", ""};
  for (const json& r : runs.value("runs", json::array())) {
    const std::string name = r.value("name", "");
    const std::string project = ProjectOfRun(name);
    const std::string labels =
        "project=\"" + Label(project) + "\",run=\"" + Label(project.empty() ? name : name.substr(project.size() + 1)) + "\"";
    info.samples += "trainscope_run_info{" + labels + ",status=\"" + Label(r.value("status", "")) + "\"} 1\n";
    const double max_step = r.value("max_step", 0.0), start = r.value("start_time", 0.0),
                 heartbeat = r.value("heartbeat", 0.0);
    step.samples += "trainscope_run_step{" + labels + "} " + Sample(max_step) + "\n";
    if (heartbeat > start && start > 0) {
      speed.samples += "trainscope_run_steps_per_second{" + labels + "} " + Sample(max_step / (heartbeat - start)) + "\n";
    }
    for (const char* severity : {"critical", "warning", "info"}) {
      const double count = r.contains("findings") ? r["findings"].value(severity, 0.0) : 0.0;
      findings.samples += "trainscope_run_findings{" + labels + ",severity=\"" + severity + "\"} " + Sample(count) + "\n";
    }
    if (heartbeat > 0) lag.samples += "trainscope_run_last_write_age_seconds{" + labels + "} " + Sample(now - heartbeat) + "\n";
  }
  std::string text;
  for (const Family* f : {&info, &step, &speed, &findings, &lag}) {
    text += std::string("# TYPE ") + f->name + " " + f->type + "\n# HELP " + f->name + " " + f->help + "\n" + f->samples;
  }
  return text + "# EOF\n";
}

}  // namespace trainscope::server
