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
#include "cli/source.h"
#include "core/streaming.h"
#include "core/tag.h"
#include "doctor/doctor.h"
#include "doctor/knowledge.h"
#include "doctor/layer_health.h"
#include "read/layer_matrix.h"
#include "store/json_forms.h"

namespace trainscope::cli {

namespace {

using json = nlohmann::json;

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

struct Line {
  std::string name, color;
  std::vector<double> x, y;
  bool dashed = false;
};

struct Mark {
  double x;
  std::string color, label;
  double x_end = NAN;  // a shaded range when set
};

// Keeps at most ~2 * buckets points, the min and max of each bucket, so spikes survive.
void Decimate(Line* line, size_t buckets = 600) {
  if (line->x.size() <= 2 * buckets) return;
  const size_t n = line->x.size(), per = (n + buckets - 1) / buckets;
  std::vector<double> x, y;
  for (size_t b = 0; b < n; b += per) {
    size_t lo = b, hi = b;
    for (size_t i = b; i < std::min(n, b + per); ++i) {
      if (!std::isfinite(line->y[i])) continue;
      if (!std::isfinite(line->y[lo]) || line->y[i] < line->y[lo]) lo = i;
      if (!std::isfinite(line->y[hi]) || line->y[i] > line->y[hi]) hi = i;
    }
    for (size_t i : {std::min(lo, hi), std::max(lo, hi)}) {
      x.push_back(line->x[i]);
      y.push_back(line->y[i]);
      if (lo == hi) break;
    }
  }
  line->x = std::move(x);
  line->y = std::move(y);
}

// Tick labels by the dashboard's rules (web/src/util.ts fmtNum, tickLabels): `digits`
// significant, plain between 1e-3 and 1e4, SI suffixes up to T above, a short exponent
// beyond; the fewest digits with which every label reads back as its tick. Same data, same labels.
std::string Trim(std::string m) {
  if (m.find('.') == std::string::npos) return m;
  while (!m.empty() && m.back() == '0') m.pop_back();
  if (!m.empty() && m.back() == '.') m.pop_back();
  return m;
}

// |v| in [1e-3, 1e4) with `digits` significant digits, in positional notation.
std::string Plain(double v, int digits) {
  const double rounded = std::stod(fmt::format("{:.{}e}", v, std::max(0, digits - 1)));
  const double a = std::fabs(rounded);
  const int decimals = a == 0 ? 0 : std::max(0, digits - 1 - static_cast<int>(std::floor(std::log10(a))));
  return Trim(fmt::format("{:.{}f}", rounded, decimals));
}

std::string TickNumber(double v, int digits) {
  if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e4 * (1 - 0.5 * std::pow(10.0, -digits)) && a < 1e15) {
    static const std::pair<double, const char*> kSi[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
    for (const auto& [scale, suffix] : kSi) {
      if (a < scale * 0.99995) continue;
      std::string m = Plain(v / scale, digits);
      if (std::fabs(std::stod(m)) >= 1000 && std::string(suffix) != "T") continue;
      return m + suffix;
    }
  }
  if (a >= 1e-3 && a < 1e4) return Plain(v, digits);
  std::string e = fmt::format("{:.{}e}", v, std::max(0, digits - 1));
  const size_t at = e.find('e');
  return Trim(e.substr(0, at)) + "e" + std::to_string(std::stoi(e.substr(at + 1)));
}

// A label of TickNumber read back as a number.
double ReadTickNumber(const std::string& label) {
  if (label.empty()) return std::nan("");
  double scale = 1;
  switch (label.back()) {
    case 'k': scale = 1e3; break;
    case 'M': scale = 1e6; break;
    case 'G': scale = 1e9; break;
    case 'T': scale = 1e12; break;
    default: break;
  }
  const std::string mantissa = scale == 1 ? label : label.substr(0, label.size() - 1);
  char* end = nullptr;
  const double v = std::strtod(mantissa.c_str(), &end);
  return end && *end == '\0' ? v * scale : std::nan("");
}

std::vector<std::string> TickLabels(const std::vector<double>& values) {
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  double spacing = std::numeric_limits<double>::infinity();
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i] > sorted[i - 1]) spacing = std::min(spacing, sorted[i] - sorted[i - 1]);
  }
  if (!std::isfinite(spacing)) spacing = sorted.empty() || sorted[0] == 0 ? 1 : std::fabs(sorted[0]);
  std::vector<std::string> labels;
  for (int digits = 1; digits <= 15; ++digits) {
    labels.clear();
    bool exact = true;
    for (double v : values) {
      labels.push_back(TickNumber(v, digits));
      const double tolerance = 1e-6 * std::min(spacing, v == 0 ? spacing : std::fabs(v));
      exact = exact && (!std::isfinite(v) || std::fabs(ReadTickNumber(labels.back()) - v) <= tolerance);
    }
    if (exact) break;
  }
  return labels;
}

// "Nice" ticks (1, 2, 5 x 10^k; whole numbers when `integer`) inside [lo, hi], about `count`
// of them (web/src/heatmap.ts niceTicks).
std::vector<double> NiceTicks(double lo, double hi, int count = 5, bool integer = false) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / count;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  if (integer) step = std::max(step, 1.0);
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + 1e-9 * step; t += step) out.push_back(std::round(t / step) * step);
  return out;
}

// The dashboard's colour ramp (web/src/util.ts viridis), t in [0, 1].
std::string Viridis(double t) {
  static const int kStops[10][3] = {{68, 1, 84},   {72, 40, 120},  {62, 74, 137},  {49, 104, 142}, {38, 130, 142},
                                    {31, 158, 137}, {53, 183, 121}, {109, 205, 89}, {180, 222, 44}, {253, 231, 37}};
  const double x = std::clamp(t, 0.0, 1.0) * 9;
  const int i = std::min(8, static_cast<int>(std::floor(x)));
  const double f = x - i;
  auto mix = [&](int c) { return static_cast<int>(std::lround(kStops[i][c] + (kStops[i + 1][c] - kStops[i][c]) * f)); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(0), mix(1), mix(2));
}

// An SVG line chart; log y when every value is positive and they span > 2 decades.
std::string LineChart(const std::string& title, std::vector<Line> lines, const std::vector<Mark>& marks,
                      const std::string& y_label) {
  const double W = 900, H = 280, L = 70, R = 20, T = 28, B = 36;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  bool positive = true;
  for (auto& l : lines) {
    Decimate(&l);
    for (size_t i = 0; i < l.x.size(); ++i) {
      x0 = std::min(x0, l.x[i]);
      x1 = std::max(x1, l.x[i]);
      if (!std::isfinite(l.y[i])) continue;
      y0 = std::min(y0, l.y[i]);
      y1 = std::max(y1, l.y[i]);
      positive = positive && l.y[i] > 0;
    }
  }
  if (!(x1 >= x0) || !(y1 >= y0)) return "";
  const bool logy = positive && y1 / y0 > 100;
  auto fy = [&](double v) { return logy ? std::log10(v) : v; };
  double ly0 = fy(y0), ly1 = fy(y1);
  if (ly1 == ly0) {
    // A constant series (a fixed learning rate) sits mid-axis: [0, 2v] for a positive v.
    if (!logy && ly0 > 0) ly1 = 2 * ly0, ly0 = 0;
    else if (!logy && ly0 < 0) ly1 = -ly0, ly0 = 2 * ly0;
    else ly1 = ly0 + 1;
  }
  if (x1 == x0) x1 = x0 + 1;
  const double pad = 0.05 * (ly1 - ly0);
  // Values that are never negative (a learning rate, a loss) keep their axis at or above 0.
  ly0 = !logy && y0 >= 0 ? std::max(0.0, ly0 - pad) : ly0 - pad;
  ly1 += pad;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return T + (1 - (fy(y) - ly0) / (ly1 - ly0)) * (H - T - B); };
  std::string svg = fmt::format(
      "<svg viewBox=\"0 0 {} {}\" width=\"100%\" role=\"img\" aria-label=\"{}\">"
      "<text x=\"{}\" y=\"18\" class=\"t\">{}</text>",
      W, H, Escape(title), L, Escape(title));
  // Axes and ticks.
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"frame\"/>", L, T, W - L - R, H - T - B);
  // y ticks: nice values (whole decades on a log axis), labelled as the dashboard does.
  std::vector<double> yt;
  if (logy) {
    for (double e = std::ceil(ly0); e <= ly1; e += std::max(1.0, std::ceil((ly1 - ly0) / 5))) yt.push_back(std::pow(10, e));
  } else {
    yt = NiceTicks(ly0, ly1, 4);
  }
  const std::vector<std::string> ylabels = TickLabels(yt);
  for (size_t i = 0; i < yt.size(); ++i) {
    const double y = py(yt[i]);
    svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>", L, W - R, y, y);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"ax\" text-anchor=\"end\">{}</text>", L - 4, y + 4,
                       ylabels[i]);
  }
  const std::vector<double> xt = NiceTicks(x0, x1, 6, /*integer=*/true);
  const std::vector<std::string> xlabels = TickLabels(xt);
  for (size_t i = 0; i < xt.size(); ++i) {
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"ax\" text-anchor=\"middle\">{}</text>", px(xt[i]),
                       H - B + 16, xlabels[i]);
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"ax\">step</text>", W - R - 30, H - 4);
  svg += fmt::format("<text x=\"8\" y=\"{}\" class=\"ax\">{}{}</text>", T - 6, Escape(y_label), logy ? " (log)" : "");
  // Finding labels in rows below the non-finite ticks: each in the first row where it clears
  // the labels already there (10 px text, about 6.2 px a character), on a white halo.
  std::vector<std::vector<std::pair<double, double>>> label_rows;
  auto label_row = [&](double left, double right) {
    for (size_t r = 0; r < label_rows.size(); ++r) {
      bool clear = true;
      for (const auto& [a, b] : label_rows[r]) clear = clear && (right + 4 < a || left > b + 4);
      if (clear) {
        label_rows[r].push_back({left, right});
        return r;
      }
    }
    label_rows.push_back({{left, right}});
    return label_rows.size() - 1;
  };
  for (const Mark& m : marks) {
    if (m.x < x0 || m.x > x1) continue;
    if (std::isfinite(m.x_end)) {
      svg += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\" opacity=\"0.15\"/>",
                         px(m.x), T, std::max(1.0, px(std::min(m.x_end, x1)) - px(m.x)), H - T - B, m.color);
    } else {
      svg += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"{3}\" stroke-dasharray=\"4 3\"/>",
                         px(m.x), T, H - B, m.color);
    }
    const double left = px(m.x) + 3, right = left + 6.2 * static_cast<double>(m.label.size());
    const size_t row = label_row(left, right);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"mk\" fill=\"{}\" paint-order=\"stroke\" stroke=\"#fff\" "
                       "stroke-width=\"3\">{}</text>", left, T + 20 + 12 * static_cast<int>(row), m.color, Escape(m.label));
  }
  double legend_x = L + 10;
  for (const Line& l : lines) {
    std::string path;
    bool pen = false;
    for (size_t i = 0; i < l.x.size(); ++i) {
      if (!std::isfinite(l.y[i]) || (logy && l.y[i] <= 0)) {
        pen = false;
        continue;
      }
      path += fmt::format("{}{:.1f},{:.1f} ", pen ? "L" : "M", px(l.x[i]), py(l.y[i]));
      pen = true;
    }
    svg += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.3\"{}/>", path, l.color,
                       l.dashed ? " stroke-dasharray=\"6 4\"" : "");
    // A series of one to three values cannot be seen as a line: drawn as points.
    size_t finite = 0;
    for (double v : l.y) finite += std::isfinite(v) && !(logy && v <= 0);
    if (finite <= 3) {
      for (size_t i = 0; i < l.x.size(); ++i) {
        if (!std::isfinite(l.y[i]) || (logy && l.y[i] <= 0)) continue;
        svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>", px(l.x[i]), py(l.y[i]), l.color);
      }
    }
    // Non-finite values: ticks on the top edge in the dashboard's non-finite colour (magenta,
    // no run's; web/src/util.ts NONFINITE_COLOR).
    for (size_t i = 0; i < l.x.size(); ++i) {
      if (!std::isfinite(l.y[i])) {
        svg += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#f0f\" stroke-width=\"2\"/>",
                           px(l.x[i]), T, T + 8);
      }
    }
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"lg\" fill=\"{}\">&#9632; {}</text>", legend_x, H - B - 6,
                       l.color, Escape(l.name));
    legend_x += 12 + 7.0 * static_cast<double>(l.name.size() + 2);
  }
  return svg + "</svg>";
}

// Layer x step heatmap of gradient L2 norms (log10 color scale; non-finite cells magenta).
std::string GradHeatmap(const RunData& data, const std::vector<std::string>& forward_params) {
  std::vector<const TensorStatsSeries*> series;
  for (const auto& p : forward_params) {
    if (const auto* s = data.FindTensorStats(tags::kGrad.Of(p))) series.push_back(s);
  }
  for (const auto& s : data.tensor_stats) {
    if (tags::kGrad.Holds(s.tag) && std::find(series.begin(), series.end(), &s) == series.end()) series.push_back(&s);
  }
  if (series.empty()) return "";
  if (series.size() > read::kMaxLayers) series.resize(read::kMaxLayers);  // the dashboard's bound
  std::vector<read::LayerPoints> layers;
  for (const TensorStatsSeries* s : series) {
    read::LayerPoints layer{s->tag.substr(tags::kGrad.prefix.size()), {}};
    for (size_t i = 0; i < s->steps.size(); ++i) {
      const TensorStats st = s->stats[i];
      layer.points.push_back({s->steps[i], st.l2_norm(), st.nan + st.inf > 0});
    }
    layers.push_back(std::move(layer));
  }
  // The dashboard's matrix (read/layer_matrix.h): a step is in the same column in both.
  const read::LayerMatrix matrix = read::BucketLayers(layers, 200);
  const size_t cols = matrix.steps.size();
  std::vector<std::vector<double>> cell(layers.size(), std::vector<double>(cols, NAN));  // log10
  double lo = INFINITY, hi = -INFINITY;
  for (size_t r = 0; r < layers.size(); ++r) {
    for (size_t c = 0; c < cols; ++c) {
      const double v = matrix.values[r][c];
      if (!(v > 0)) continue;
      cell[r][c] = std::log10(v);
      lo = std::min(lo, cell[r][c]);
      hi = std::max(hi, cell[r][c]);
    }
  }
  if (!(hi >= lo)) hi = lo = 0;
  if (hi == lo) hi = lo + 1;
  const auto& bad = matrix.nonfinite;
  const auto& rows = layers;
  int64_t s0 = INT64_MAX, s1 = INT64_MIN;
  for (const read::LayerPoints& layer : layers) {
    for (const read::LayerPoint& p : layer.points) s0 = std::min(s0, p.step), s1 = std::max(s1, p.step);
  }
  // Rows at least 12 px for 10 px labels, so labels never overlap; hundreds of parameters
  // make a tall picture that scrolls in its box (see BuildReport).
  const double L = 220, T = 28, cw = 680.0 / static_cast<double>(cols),
               ch = std::clamp(220.0 / static_cast<double>(rows.size()), 12.0, 16.0);
  const double W = L + 680 + 90, H = T + ch * static_cast<double>(rows.size()) + 30;
  std::string svg = fmt::format(
      "<svg viewBox=\"0 0 {} {}\" width=\"100%\" role=\"img\" aria-label=\"gradient norms\">"
      "<text x=\"{}\" y=\"18\" class=\"t\">Gradient L2 norm per layer (rows, forward order) x step (log10 colour; "
      "magenta = NaN/Inf)</text>",
      W, H, L);
  auto color = [&](double lv) { return Viridis((lv - lo) / (hi - lo)); };  // the dashboard's colours
  for (size_t r = 0; r < rows.size(); ++r) {
    const double y = T + ch * static_cast<double>(r);
    // Shortened from the left: the end of a parameter name tells rows apart (~5.6 px a character).
    std::string label = rows[r].name;
    if (label.size() > 38) label = "\xe2\x80\xa6" + label.substr(label.size() - 37);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"ax\" text-anchor=\"end\">{}</text>", L - 4, y + ch * 0.75,
                       Escape(label));
    for (size_t c = 0; c < cols; ++c) {
      std::string fill;
      if (bad[r][c]) fill = "#e0f";
      else if (!std::isnan(cell[r][c])) fill = color(cell[r][c]);
      else continue;
      svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\"/>",
                         L + cw * static_cast<double>(c), y, cw + 0.3, ch, fill);
    }
  }
  const double yb = T + ch * static_cast<double>(rows.size());
  svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"ax\">step {}</text>", L, yb + 14, s0);
  svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"ax\" text-anchor=\"end\">step {}</text>", L + 680, yb + 14, s1);
  for (int i = 0; i <= 4; ++i) {
    const double lv = lo + (hi - lo) * i / 4;
    svg += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"14\" height=\"12\" fill=\"{}\"/>", L + 690,
                       T + 14.0 * i, color(lv));
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"ax\">{}</text>", L + 708, T + 14.0 * i + 10,
                       TickNumber(std::pow(10.0, lv), 2));
  }
  return svg + "</svg>";
}

Line FromScalar(const ScalarSeries& s, const std::string& color, double scale = 1) {
  Line l;
  l.name = s.tag;
  l.color = color;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    l.x.push_back(static_cast<double>(s.steps[i]));
    l.y.push_back(s.values[i] * scale);
  }
  return l;
}

const char* SeverityColor(Severity s) {
  return s == Severity::kCritical ? "#c00" : s == Severity::kWarning ? "#d80" : "#469";
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

  // Findings.
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

  // Loss with the findings that live on it.
  html += "<h2>Loss</h2>";
  std::vector<Line> lines;
  if (const auto* s = roles.Has(doctor::Role::kLoss) ? run.data.FindScalar(roles.Get(doctor::Role::kLoss)) : nullptr) {
    lines.push_back(FromScalar(*s, "#1f77b4"));
  }
  if (const auto* s = roles.Has(doctor::Role::kValLoss) ? run.data.FindScalar(roles.Get(doctor::Role::kValLoss)) : nullptr) {
    lines.push_back(FromScalar(*s, "#ff7f0e"));
    lines.back().dashed = true;
  }
  std::vector<Mark> marks;
  for (const Finding& f : d.findings) {
    const doctor::CodeInfo* info = doctor::KnowledgeBase::Builtin().Code(f.code);
    if (info && info->loss_mark == "point") {
      marks.push_back({static_cast<double>(f.step), SeverityColor(f.severity), f.code});
    } else if (info && info->loss_mark == "range") {
      marks.push_back({static_cast<double>(f.step), SeverityColor(f.severity), f.code, static_cast<double>(f.last_step)});
    }
  }
  const std::string loss_svg = lines.empty() ? "" : LineChart("Training and validation loss", lines, marks, "loss");
  html += loss_svg.empty() ? "<p>No loss series.</p>" : loss_svg;

  // Gradient heatmap.
  html += "<h2>Gradients per layer</h2>";
  const std::string heat = GradHeatmap(run.data, forward);
  html += heat.empty() ? "<p>No per-parameter gradient statistics recorded.</p>"
                       : "<div class=\"heat\">" + heat + "</div>";

  // Memory with the leak fit.
  html += "<h2>Memory</h2>";
  bool any_memory = false;
  for (const char* tag : {tags::kMemRss, tags::kMemCudaAllocated}) {
    const ScalarSeries* s = run.data.FindScalar(tag);
    if (!s || s->values.empty()) continue;
    any_memory = true;
    std::vector<Line> mem = {FromScalar(*s, "#2ca02c", 1e-6)};
    mem[0].name = std::string(tag) + " (MB)";
    std::vector<Mark> mem_marks;
    for (const Finding& f : d.findings) {
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
