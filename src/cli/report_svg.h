// The HTML report's pictures as inline SVG (no script): line charts with finding marks
// (log y when the values span more than two decades), the layer x step gradient heatmap,
// and the number formats and colours they share with the dashboard (web/src/util.ts,
// heatmap.ts), so that a report and the dashboard label and colour a run alike.
#pragma once

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "core/run_data.h"

namespace trainscope::cli::report_svg {

std::string Escape(std::string_view s);

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

// A number as the dashboard's axes write it, in at most `digits` significant digits.
std::string TickNumber(double v, int digits);

// An SVG line chart; log y when every value is positive and they span > 2 decades.
std::string LineChart(const std::string& title, std::vector<Line> lines, const std::vector<Mark>& marks,
                      const std::string& y_label);

// Layer x step heatmap of gradient L2 norms (log10 colour; non-finite cells magenta), rows
// in forward order (`forward_params` first, then the other gradients).
std::string GradHeatmap(const RunData& data, const std::vector<std::string>& forward_params);

// A scalar series as a line, its values times `scale`.
Line FromScalar(const ScalarSeries& s, const std::string& color, double scale = 1);

}  // namespace trainscope::cli::report_svg
