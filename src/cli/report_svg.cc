#include "cli/report_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/tag.h"
#include "read/layer_matrix.h"

namespace trainscope::cli::report_svg {

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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

namespace {

// A chart's plot area and its scales: x (steps) linear, y linear or log10.
struct ChartFrame {
  static constexpr double W = 900, H = 280, L = 70, R = 20, T = 28, B = 36;
  double x0 = INFINITY, x1 = -INFINITY, ly0 = 0, ly1 = 0;
  double y0 = INFINITY, y1 = -INFINITY;  // the finite values' range
  bool logy = false;
  double fy(double v) const { return logy ? std::log10(v) : v; }
  double px(double x) const { return L + (x - x0) / (x1 - x0) * (W - L - R); }
  double py(double y) const { return T + (1 - (fy(y) - ly0) / (ly1 - ly0)) * (H - T - B); }
};

// The frame that holds every line (decimated first); false when there is nothing to draw. A
// positive series spanning more than two decades gets a log axis.
bool FitFrame(std::vector<Line>* lines, ChartFrame* f) {
  bool positive = true;
  for (auto& l : *lines) {
    Decimate(&l);
    for (size_t i = 0; i < l.x.size(); ++i) {
      f->x0 = std::min(f->x0, l.x[i]);
      f->x1 = std::max(f->x1, l.x[i]);
      if (!std::isfinite(l.y[i])) continue;
      f->y0 = std::min(f->y0, l.y[i]);
      f->y1 = std::max(f->y1, l.y[i]);
      positive = positive && l.y[i] > 0;
    }
  }
  if (!(f->x1 >= f->x0) || !(f->y1 >= f->y0)) return false;
  f->logy = positive && f->y1 / f->y0 > 100;
  double ly0 = f->fy(f->y0), ly1 = f->fy(f->y1);
  if (ly1 == ly0) {
    // A constant series (a fixed learning rate) sits mid-axis: [0, 2v] for a positive v.
    if (!f->logy && ly0 > 0) ly1 = 2 * ly0, ly0 = 0;
    else if (!f->logy && ly0 < 0) ly1 = -ly0, ly0 = 2 * ly0;
    else ly1 = ly0 + 1;
  }
  if (f->x1 == f->x0) f->x1 = f->x0 + 1;
  const double pad = 0.05 * (ly1 - ly0);
  // Values that are never negative (a learning rate, a loss) keep their axis at or above 0.
  f->ly0 = !f->logy && f->y0 >= 0 ? std::max(0.0, ly0 - pad) : ly0 - pad;
  f->ly1 = ly1 + pad;
  return true;
}

// The frame, its grid and ticks (nice values, whole decades on a log axis, labelled as the
// dashboard does) and the axis labels.
std::string AxesSvg(const ChartFrame& f, const std::string& y_label) {
  constexpr double W = ChartFrame::W, H = ChartFrame::H, L = ChartFrame::L, R = ChartFrame::R, T = ChartFrame::T,
                   B = ChartFrame::B;
  std::string svg =
      fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"frame\"/>", L, T, W - L - R, H - T - B);
  std::vector<double> yt;
  if (f.logy) {
    for (double e = std::ceil(f.ly0); e <= f.ly1; e += std::max(1.0, std::ceil((f.ly1 - f.ly0) / 5))) {
      yt.push_back(std::pow(10, e));
    }
  } else {
    yt = NiceTicks(f.ly0, f.ly1, 4);
  }
  const std::vector<std::string> ylabels = TickLabels(yt);
  for (size_t i = 0; i < yt.size(); ++i) {
    const double y = f.py(yt[i]);
    svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>", L, W - R, y, y);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"ax\" text-anchor=\"end\">{}</text>", L - 4, y + 4,
                       ylabels[i]);
  }
  const std::vector<double> xt = NiceTicks(f.x0, f.x1, 6, /*integer=*/true);
  const std::vector<std::string> xlabels = TickLabels(xt);
  for (size_t i = 0; i < xt.size(); ++i) {
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"ax\" text-anchor=\"middle\">{}</text>", f.px(xt[i]),
                       H - B + 16, xlabels[i]);
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"ax\">step</text>", W - R - 30, H - 4);
  svg += fmt::format("<text x=\"8\" y=\"{}\" class=\"ax\">{}{}</text>", T - 6, Escape(y_label), f.logy ? " (log)" : "");
  return svg;
}

// The findings' marks: a dashed line at a step or a band over a range, each labelled.
std::string MarksSvg(const ChartFrame& f, const std::vector<Mark>& marks) {
  constexpr double H = ChartFrame::H, T = ChartFrame::T, B = ChartFrame::B;
  const double x0 = f.x0, x1 = f.x1;
  auto px = [&](double x) { return f.px(x); };
  std::string svg;
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
  return svg;
}

// One line: its path (broken at non-finite values), points when it has three or fewer, the
// non-finite values as ticks on the top edge, and its legend entry at *legend_x.
std::string LineSvg(const ChartFrame& f, const Line& l, double* legend_x) {
  constexpr double H = ChartFrame::H, T = ChartFrame::T, B = ChartFrame::B;
  const bool logy = f.logy;
  auto px = [&](double x) { return f.px(x); };
  auto py = [&](double y) { return f.py(y); };
  std::string svg;
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
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"lg\" fill=\"{}\">&#9632; {}</text>", *legend_x, H - B - 6,
                     l.color, Escape(l.name));
  *legend_x += 12 + 7.0 * static_cast<double>(l.name.size() + 2);
  return svg;
}

}  // namespace

std::string LineChart(const std::string& title, std::vector<Line> lines, const std::vector<Mark>& marks,
                      const std::string& y_label) {
  ChartFrame frame;
  if (!FitFrame(&lines, &frame)) return "";
  std::string svg = fmt::format(
      "<svg viewBox=\"0 0 {} {}\" width=\"100%\" role=\"img\" aria-label=\"{}\">"
      "<text x=\"{}\" y=\"18\" class=\"t\">{}</text>",
      ChartFrame::W, ChartFrame::H, Escape(title), ChartFrame::L, Escape(title));
  svg += AxesSvg(frame, y_label);
  svg += MarksSvg(frame, marks);
  double legend_x = ChartFrame::L + 10;
  for (const Line& l : lines) svg += LineSvg(frame, l, &legend_x);
  return svg + "</svg>";
}

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

Line FromScalar(const ScalarSeries& s, const std::string& color, double scale) {
  Line l;
  l.name = s.tag;
  l.color = color;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    l.x.push_back(static_cast<double>(s.steps[i]));
    l.y.push_back(s.values[i] * scale);
  }
  return l;
}

}  // namespace trainscope::cli::report_svg
