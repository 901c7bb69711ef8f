// `trainscope report PATH -o report.html`: one self-contained HTML file (no script, no
// server, no network) with the doctor's findings and the plots that prove them: the loss
// with spikes, divergence and non-finite steps marked; per-layer gradient norms as a
// layer x step heatmap; memory with the fitted leak slope.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/report_svg.h"
#include "cli/source.h"
#include "core/streaming.h"
#include "core/tag.h"
#include "doctor/doctor.h"
#include "doctor/knowledge.h"
#include "doctor/layer_health.h"
#include "store/json_forms.h"

namespace trainscope::cli {

namespace {

using json = nlohmann::json;
using namespace report_svg;

const char* SeverityColor(Severity s) {
  return s == Severity::kCritical ? "#c00" : s == Severity::kWarning ? "#d80" : "#469";
}

// Every finding, worst first, with its evidence, causes and actions; then what was not
// checked and why.
std::string FindingsSection(const doctor::Diagnosis& d) {
  std::string html;
  html += "<h2>Findings (worst first)</h2>";
  if (d.findings.empty()) html += "<p>No findings.</p>";
  for (const Finding& f : d.findings) {
    const json fj = FindingToJson(f);
    json evidence = fj["evidence"];
    json flight;
    if (evidence.contains("flight_recorder")) {
      flight = evidence["flight_recorder"];
      evidence.erase("flight_recorder");
    }
    html += fmt::format("<div class=\"f\" style=\"border-color:{}\"><span class=\"sev\" style=\"color:{}\">{}</span> "
                        "<b>{}</b> at step {}{}{}<br>{}",
                        SeverityColor(f.severity), SeverityColor(f.severity), SeverityName(f.severity), Escape(f.code),
                        f.step, f.last_step != f.step ? fmt::format("&ndash;{}", f.last_step) : "",
                        f.location.empty() ? "" : " in <code>" + Escape(f.location) + "</code>", Escape(f.summary));
    if (!f.causes.empty()) {
      html += "<br>Likely causes: ";
      for (size_t i = 0; i < f.causes.size(); ++i) {
        html += fmt::format("{}<code>{}</code> ({:.0f}%)", i ? ", " : "", Escape(f.causes[i].id),
                            100 * f.causes[i].confidence);
      }
    }
    if (!f.actions.empty()) {
      html += "<ul>";
      for (const auto& a : f.actions) html += "<li>" + Escape(a) + "</li>";
      html += "</ul>";
    }
    html += "<details><summary>evidence</summary><pre>" + Escape(evidence.dump(1)) + "</pre></details>";
    if (!flight.is_null()) {
      html += "<details><summary>flight recorder (last steps before)</summary><pre>" + Escape(flight.dump()) +
              "</pre></details>";
    }
    html += "</div>";
  }
  if (!d.not_checked.empty()) {
    html += "<h2>Not checked, and why</h2><ul>";
    for (const auto& n : d.not_checked) {
      std::string codes;
      for (const auto& c : n.codes) codes += (codes.empty() ? "" : ", ") + c;
      html += "<li><b>" + Escape(n.check) + "</b> (" + Escape(codes) + "): " + Escape(n.reason) + "</li>";
    }
    html += "</ul>";
  }

  return html;
}

// The loss and validation loss with the findings that live on them (the knowledge base's
// loss_mark: a point or a range).
std::string LossSection(const RunData& data, const std::vector<Finding>& findings, const doctor::RoleResolver& roles) {
  std::string html;
  html += "<h2>Loss</h2>";
  std::vector<Line> lines;
  if (const auto* s = roles.Has(doctor::Role::kLoss) ? data.FindScalar(roles.Get(doctor::Role::kLoss)) : nullptr) {
    lines.push_back(FromScalar(*s, "#1f77b4"));
  }
  if (const auto* s = roles.Has(doctor::Role::kValLoss) ? data.FindScalar(roles.Get(doctor::Role::kValLoss)) : nullptr) {
    lines.push_back(FromScalar(*s, "#ff7f0e"));
    lines.back().dashed = true;
  }
  std::vector<Mark> marks;
  for (const Finding& f : findings) {
    const doctor::CodeInfo* info = doctor::KnowledgeBase::Builtin().Code(f.code);
    if (info && info->loss_mark == "point") {
      marks.push_back({static_cast<double>(f.step), SeverityColor(f.severity), f.code});
    } else if (info && info->loss_mark == "range") {
      marks.push_back({static_cast<double>(f.step), SeverityColor(f.severity), f.code, static_cast<double>(f.last_step)});
    }
  }
  const std::string loss_svg = lines.empty() ? "" : LineChart("Training and validation loss", lines, marks, "loss");
  html += loss_svg.empty() ? "<p>No loss series.</p>" : loss_svg;

  return html;
}

// Each memory series with the fitted slope of a MEMORY_LEAK finding on it.
std::string MemorySection(const RunData& data, const std::vector<Finding>& findings) {
  std::string html;
  html += "<h2>Memory</h2>";
  bool any_memory = false;
  for (const char* tag : {tags::kMemRss, tags::kMemCudaAllocated}) {
    const ScalarSeries* s = data.FindScalar(tag);
    if (!s || s->values.empty()) continue;
    any_memory = true;
    std::vector<Line> mem = {FromScalar(*s, "#2ca02c", 1e-6)};
    mem[0].name = std::string(tag) + " (MB)";
    std::vector<Mark> mem_marks;
    for (const Finding& f : findings) {
      if (f.code != "MEMORY_LEAK" || f.location != tag) continue;
      const json ev = FindingToJson(f)["evidence"];
      if (ev.contains("slope_bytes_per_step") && ev["slope_bytes_per_step"].is_number() && ev.contains("intercept") &&
          ev["intercept"].is_number()) {
        const double slope = ev["slope_bytes_per_step"], intercept = ev["intercept"];
        Line fit;
        fit.name = fmt::format("leak fit: {:.3g} MB/step", slope / 1e6);
        fit.color = "#d62728";
        fit.dashed = true;
        for (double x : {static_cast<double>(f.step), static_cast<double>(s->steps.back())}) {
          fit.x.push_back(x);
          fit.y.push_back((intercept + slope * x) * 1e-6);
        }
        mem.push_back(fit);
        mem_marks.push_back({static_cast<double>(f.step), "#d62728", "leak since"});
      }
    }
    html += LineChart(std::string("Memory: ") + tag, mem, mem_marks, "MB");
  }
  if (!any_memory) html += "<p>No memory series recorded.</p>";

  return html;
}

std::string BuildReport(const LoadedRun& run, const doctor::Diagnosis& d) {
  // Roles and forward order, as the doctor sees them.
  doctor::RoleResolver roles;
  if (auto it = run.data.meta.find("roles"); it != run.data.meta.end()) roles.SetExplicit(it->second);
  for (const auto& s : run.data.scalars) roles.See(s.tag);
  std::vector<std::string> forward;
  if (auto it = run.data.meta.find("module_order"); it != run.data.meta.end()) {
    json order = json::parse(it->second, nullptr, false);
    std::vector<std::string> modules;
    if (order.is_array()) {
      for (const auto& m : order) {
        if (m.is_string()) modules.push_back(m.get<std::string>());
      }
    }
    for (const auto& m : modules) {
      for (const auto& s : run.data.tensor_stats) {
        std::string_view param;
        if (tags::kGrad.Holds(s.tag, &param) && doctor::RunFacts::ModuleOfParam(std::string(param)) == m) {
          forward.emplace_back(param);
        }
      }
    }
  }
  for (const auto& s : run.data.tensor_stats) {
    std::string_view param;
    if (tags::kWeight.Holds(s.tag, &param) && std::find(forward.begin(), forward.end(), param) == forward.end()) {
      forward.emplace_back(param);
    }
  }

  std::string html;
  html += "<!doctype html><html><head><meta charset=\"utf-8\"><title>trainscope report: " + Escape(run.source) +
          "</title><style>"
          "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#222}"
          "h1{font-size:20px}h2{font-size:16px;margin-top:28px}"
          ".f{border-left:4px solid;padding:4px 10px;margin:10px 0;background:#fafafa}"
          ".sev{font-weight:600;text-transform:uppercase;font-size:12px}"
          "code,pre{font:12px ui-monospace,monospace}pre{white-space:pre-wrap;max-height:260px;overflow:auto;background:#f3f3f3;padding:6px}"
          "svg .t{font-size:13px;font-weight:600}svg .ax{font-size:10px;fill:#555}svg .lg{font-size:11px}"
          "svg .mk{font-size:10px}svg .frame{fill:none;stroke:#bbb}svg .grid{stroke:#eee}"
          ".heat{max-height:640px;overflow-y:auto;border:1px solid #eee}"
          "</style></head><body>";
  html += fmt::format("<h1>trainscope report</h1><p><code>{}</code> ({}, {} steps judged) &mdash; {} finding(s)</p>",
                      Escape(run.source), Escape(run.format), d.steps, d.findings.size());
  if (!run.damage.empty()) {
    html += "<p class=\"damage\" style=\"border-left:4px solid #c62828;padding:4px 10px;background:#fdecea\">"
            "<b>Damaged store:</b> " + Escape(run.damage) + "; this report is of what could be read.</p>";
  }

  // One action, then each layer's health (doctor/layer_health.h), on top.
  if (const Finding* f = doctor::FirstAction(d.findings)) {
    html += fmt::format("<p><b>First:</b> {} <small>({} at step {})</small></p>", Escape(f->actions.front()),
                        Escape(f->code), f->step);
  }
  std::vector<doctor::LayerHealth> layers = doctor::LayerHealthOf(run.data, d.findings);
  if (!layers.empty()) {
    std::stable_sort(layers.begin(), layers.end(), [](const auto& a, const auto& b) { return a.score < b.score; });
    html += "<h2>Layer health (worst first)</h2><table class=\"layers\"><tr><th>layer</th><th>score</th><th>why</th></tr>";
    for (size_t i = 0; i < layers.size() && i < 15; ++i) {
      html += fmt::format("<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>", Escape(layers[i].layer),
                          layers[i].score, Escape(layers[i].worst));
    }
    html += "</table>";
    if (layers.size() > 15) html += fmt::format("<p>{} more layers.</p>", layers.size() - 15);
  }

  html += FindingsSection(d);

  html += LossSection(run.data, d.findings, roles);

  // Gradient heatmap.
  html += "<h2>Gradients per layer</h2>";
  const std::string heat = GradHeatmap(run.data, forward);
  html += heat.empty() ? "<p>No per-parameter gradient statistics recorded.</p>"
                       : "<div class=\"heat\">" + heat + "</div>";

  html += MemorySection(run.data, d.findings);

  // Learning rate, when there is one.
  if (const auto* s = roles.Has(doctor::Role::kLr) ? run.data.FindScalar(roles.Get(doctor::Role::kLr)) : nullptr) {
    html += "<h2>Learning rate</h2>" + LineChart("Learning rate", {FromScalar(*s, "#9467bd")}, {}, "lr");
  }
  html += "<p style=\"color:#888;font-size:12px\">Written by trainscope report. Self-contained: no scripts, no "
          "network.</p></body></html>\n";
  return html;
}

int ReportCommand(const std::string& path, const std::string& out) {
  std::vector<LoadedRun> runs;
  bool is_logdir = false;
  Status s = LoadSources(path, &runs, &is_logdir);
  if (!s.ok()) {
    fmt::print(stderr, "trainscope report: {}\n", s.message());
    return 2;
  }
  std::string html;
  for (const LoadedRun& run : runs) {
    const doctor::Diagnosis d = doctor::Diagnose(run.data);
    std::string one = BuildReport(run, d);
    if (runs.size() == 1) {
      html = std::move(one);
      break;
    }
    // A logdir: one section per run, in one file.
    const size_t body = one.find("<body>") + 6, end = one.rfind("</body>");
    if (html.empty()) html = one.substr(0, body);
    html += "<hr>" + one.substr(body, end - body);
  }
  if (runs.size() > 1) html += "</body></html>\n";
  std::ofstream f(out, std::ios::binary);
  if (!f || !(f << html) || !f.flush()) {
    fmt::print(stderr, "trainscope report: {}: cannot write the report\n", out);
    return 2;
  }
  fmt::print("wrote {} ({} run{}, {} KB)\n", out, runs.size(), runs.size() == 1 ? "" : "s", html.size() / 1024);
  return 0;
}

}  // namespace

void AddReportCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("report", "Write one self-contained HTML report: findings and the plots that prove them.");
  struct Args {
    std::string path;
    std::string out = "report.html";
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("PATH", args->path, "A run directory, a logdir of runs, or a log file")->required();
  cmd->add_option("-o,--output", args->out, "The HTML file to write (default report.html)");
  cmd->callback([args, exit_code] { *exit_code = ReportCommand(args->path, args->out); });
}

}  // namespace trainscope::cli
