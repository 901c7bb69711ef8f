// `trainscope numerics formats|fit|fp8`: the floating-point format table, and what of a
// recorded run fits which format (docs/numerics.md).
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/source.h"
#include "numerics/fit.h"
#include "numerics/formats.h"
#include "numerics/report.h"

namespace trainscope::cli {

namespace {

using json = nlohmann::json;
using numerics::FloatFormat;
using numerics::FormatTable;

std::string Percent(double fraction) {
  if (fraction == 0) return "0";
  if (fraction < 1e-4) return fmt::format("{:.2g}%", 100 * fraction);
  return fmt::format("{:.2f}%", 100 * fraction);
}

int FormatsCommand(bool as_json, const std::string& extra) {
  FormatTable table;
  if (Status s = numerics::LoadFormatTable(extra, &table); !s.ok()) {
    fmt::print(stderr, "trainscope numerics formats: {}\n", s.message());
    return 2;
  }
  if (as_json) {
    json rows = json::array();
    for (const FloatFormat& f : table.formats()) rows.push_back(numerics::FormatToJson(f));
    fmt::print("{}\n", json{{"formats", rows}}.dump(1));
    return 0;
  }
  fmt::print("{:<13} {:>4} {:>3} {:>3} {:>5} {:>12} {:>11} {:>13} {:>10} {:>6}  {:<7} {:<7}  {}\n", "FORMAT", "BITS",
             "E", "M", "BIAS", "MAX", "MIN_NORMAL", "MIN_SUBNORMAL", "EPSILON", "DIGITS", "INF", "NAN", "MAX =");
  for (const FloatFormat& f : table.formats()) {
    fmt::print("{:<13} {:>4} {:>3} {:>3} {:>5} {:>12.6g} {:>11.4g} {:>13.4g} {:>10.4g} {:>6.2f}  {:<7} {:<7}  {}\n",
               f.name(), f.bits, f.layout.exponent_bits, f.layout.mantissa_bits, f.bias, f.max_finite, f.min_normal,
               f.min_subnormal, f.epsilon, f.decimal_digits,
               f.has_inf ? numerics::PatternHex(f, f.inf_pattern) : "none",
               f.has_nan ? numerics::PatternHex(f, f.nan_pattern) : "none", numerics::MaxFormula(f));
  }
  return 0;
}

// "4096", "2^12" or "auto" -> exponent; powers of two only (the bins shift exactly).
bool ParseLossScale(const std::string& text, int* exponent, bool* automatic) {
  *automatic = false;
  if (text.empty() || text == "1") {
    *exponent = 0;
    return true;
  }
  if (text == "auto") {
    *automatic = true;
    return true;
  }
  try {
    if (text.rfind("2^", 0) == 0) {
      size_t used = 0;
      *exponent = std::stoi(text.substr(2), &used);
      return used == text.size() - 2 && std::abs(*exponent) <= 126;
    }
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used != text.size() || !(v > 0)) return false;
    int e = 0;
    const double m = std::frexp(v, &e);
    if (m != 0.5) return false;
    *exponent = e - 1;
    return std::abs(*exponent) <= 126;
  } catch (...) {
    return false;
  }
}

bool ParseSteps(const std::string& text, int64_t* lo, int64_t* hi) {
  if (text.empty()) return true;
  const size_t colon = text.find(':');
  try {
    if (colon == std::string::npos) {
      *lo = *hi = std::stoll(text);
      return true;
    }
    if (colon > 0) *lo = std::stoll(text.substr(0, colon));
    if (colon + 1 < text.size()) *hi = std::stoll(text.substr(colon + 1));
    return *lo <= *hi;
  } catch (...) {
    return false;
  }
}

struct FitArgs {
  std::string path;
  std::vector<std::string> formats;
  std::string loss_scale;
  std::string steps;
  std::vector<std::string> families;
  std::string extra_formats;
  int top = 20;
  int history = 16;
  bool json = false;
};

Status LoadOne(const std::string& path, std::vector<LoadedRun>* runs) {
  bool is_logdir = false;
  if (Status s = LoadSources(path, runs, &is_logdir); !s.ok()) return s;
  if (runs->empty()) return Status::NotFound(path + ": no run found");
  if (runs->size() > 1) {
    return Status::InvalidArgument(path + ": a logdir of " + std::to_string(runs->size()) +
                                   " runs; give one run (its directory)");
  }
  return Status::Ok();
}

void PrintFitTable(const json& fit, int top) {
  fmt::print("format {} (loss scale on gradients: {})\n", fit["format"].get<std::string>(),
             fit["loss_scale"].get<double>());
  const json& tensors = fit["tensors"];
  if (tensors.empty()) {
    fmt::print("  no exponent histograms recorded (watch(..., histograms_every=N) records them)\n");
    return;
  }
  fmt::print("  {:<44} {:>13} {:>9} {:>10} {:>10} {:>11}\n", "TENSOR", "STEPS", "OVERFLOW", "UNDERFLOW", "SUBNORMAL",
             "ABS_MAX");
  int shown = 0;
  for (const json& t : tensors) {
    if (shown++ >= top) {
      fmt::print("  ... {} more (--top N)\n", tensors.size() - static_cast<size_t>(top));
      break;
    }
    const std::string steps = fmt::format("{}-{}", t["step_first"].get<int64_t>(), t["step_last"].get<int64_t>());
    const std::string abs_max = t["abs_max"].is_number() ? fmt::format("{:.4g}", t["abs_max"].get<double>())
                                                         : t["abs_max"].dump();
    fmt::print("  {:<44} {:>13} {:>9} {:>10} {:>10} {:>11}\n", t["tag"].get<std::string>(), steps,
               Percent(t["overflow"].get<double>()), Percent(t["underflow"].get<double>()),
               Percent(t["subnormal"].get<double>()), abs_max);
  }
  if (fit.contains("gradient_loss_scale")) {
    const json& a = fit["gradient_loss_scale"];
    fmt::print("  gradients: {} flushed to zero at scale 1; a loss scale of 2^{} ({:g}) leaves {} flushed and {} "
               "overflowing (any 2^k for k in {}..{} does as well; largest gradient {:.4g} in {})\n",
               Percent(a["at_scale_1"]["underflow"].get<double>()), a["recommended_exponent"].get<int>(),
               a["recommended"].get<double>(), Percent(a["at_recommended"]["underflow"].get<double>()),
               Percent(a["at_recommended"]["overflow"].get<double>()), a["exponent_low"].get<int>(),
               a["exponent_high"].get<int>(),
               a["largest_gradient"].is_number() ? a["largest_gradient"].get<double>() : NAN,
               a["largest_gradient_tag"].get<std::string>());
  }
}

int FitCommand(const FitArgs& args) {
  FormatTable table;
  if (Status s = numerics::LoadFormatTable(args.extra_formats, &table); !s.ok()) {
    fmt::print(stderr, "trainscope numerics fit: {}\n", s.message());
    return 2;
  }
  std::vector<const FloatFormat*> formats;
  for (const std::string& list : args.formats) {
    if (Status s = table.FindList(list, &formats, {"fp16", "bf16", "fp8-e4m3", "fp8-e5m2"}); !s.ok()) {
      fmt::print(stderr, "trainscope numerics fit: {}\n", s.message());
      return 2;
    }
  }
  if (formats.empty()) formats.push_back(table.Find("fp16"));
  numerics::FitOptions options;
  bool automatic = false;
  if (!ParseLossScale(args.loss_scale, &options.grad_scale_exponent, &automatic)) {
    fmt::print(stderr, "trainscope numerics fit: --loss-scale '{}': expected a power of two (4096, 2^12) or auto\n",
               args.loss_scale);
    return 2;
  }
  if (!ParseSteps(args.steps, &options.step_min, &options.step_max)) {
    fmt::print(stderr, "trainscope numerics fit: --steps '{}': expected A:B, A:, :B or A\n", args.steps);
    return 2;
  }
  options.families = args.families;
  std::vector<LoadedRun> runs;
  if (Status s = LoadOne(args.path, &runs); !s.ok()) {
    fmt::print(stderr, "trainscope numerics fit: {}\n", s.message());
    return 2;
  }
  const RunData& data = runs[0].data;
  std::vector<json> fits;
  for (const FloatFormat* f : formats) {
    numerics::FitOptions o = options;
    if (automatic) {
      const json first = numerics::FitToJson(data, *f, o);
      if (first.contains("gradient_loss_scale")) o.grad_scale_exponent = first["gradient_loss_scale"]["recommended_exponent"];
    }
    json fit = numerics::FitToJson(data, *f, o);
    fit["source"] = runs[0].source;
    fits.push_back(std::move(fit));
  }
  if (args.json) {
    if (fits.size() == 1) {
      fmt::print("{}\n", fits[0].dump(1));
    } else {
      json out = {{"source", runs[0].source}, {"formats", fits},
                  {"matrix", numerics::FitMatrixJson(data, formats, options)}};
      fmt::print("{}\n", out.dump(1));
    }
    return 0;
  }
  fmt::print("{} ({})\n", runs[0].source, runs[0].format);
  for (const json& fit : fits) PrintFitTable(fit, args.top);
  if (formats.size() > 1) {
    const json m = numerics::FitMatrixJson(data, formats, options);
    fmt::print("lost (overflow + flushed to zero) per format:\n  {:<44}", "TENSOR");
    for (const auto& n : m["formats"]) fmt::print(" {:>10}", n.get<std::string>());
    fmt::print("\n");
    int shown = 0;
    for (const json& r : m["rows"]) {
      if (shown++ >= args.top) break;
      fmt::print("  {:<44}", r["tag"].get<std::string>());
      for (const auto& v : r["lost"]) fmt::print(" {:>10}", Percent(v.get<double>()));
      fmt::print("\n");
    }
  }
  return 0;
}

int Fp8Command(const FitArgs& args) {
  FormatTable table;
  if (Status s = numerics::LoadFormatTable(args.extra_formats, &table); !s.ok()) {
    fmt::print(stderr, "trainscope numerics fp8: {}\n", s.message());
    return 2;
  }
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  if (!ParseSteps(args.steps, &lo, &hi)) {
    fmt::print(stderr, "trainscope numerics fp8: --steps '{}': expected A:B, A:, :B or A\n", args.steps);
    return 2;
  }
  if (args.history < 1) {
    fmt::print(stderr, "trainscope numerics fp8: --history must be >= 1\n");
    return 2;
  }
  std::vector<LoadedRun> runs;
  if (Status s = LoadOne(args.path, &runs); !s.ok()) {
    fmt::print(stderr, "trainscope numerics fp8: {}\n", s.message());
    return 2;
  }
  json out = numerics::Fp8ReadinessJson(runs[0].data, *table.Find("fp8-e4m3"), *table.Find("fp8-e5m2"), args.history,
                                        lo, hi);
  out["source"] = runs[0].source;
  if (args.json) {
    fmt::print("{}\n", out.dump(1));
    return 0;
  }
  fmt::print("{}: FP8 with delayed per-tensor scaling (amax history {} points; E4M3 forward, E5M2 backward)\n",
             runs[0].source, args.history);
  fmt::print("  {:<44} {:<9} {:>8} {:>9} {:>10} {:>8} {:>14}\n", "TENSOR", "FORMAT", "SCALE", "OVERFLOW", "UNDERFLOW",
             "LOST", "STALE-SCALE");
  int shown = 0;
  for (const json& t : out["tensors"]) {
    if (shown++ >= args.top) break;
    fmt::print("  {:<44} {:<9} {:>8} {:>9} {:>10} {:>8} {:>14}\n", t["tag"].get<std::string>(),
               t["format"].get<std::string>(), fmt::format("2^{}", t["scale_exponent"].get<int>()),
               Percent(t["overflow"].get<double>()), Percent(t["underflow"].get<double>()),
               Percent(t["lost"].get<double>()),
               fmt::format("{}/{} steps", t["overflow_points"].get<size_t>(), t["points"].get<size_t>()));
  }
  return 0;
}

}  // namespace

void AddNumericsCommand(CLI::App& app, int* exit_code) {
  CLI::App* numerics = app.add_subcommand("numerics", "Floating-point formats, and what of a run fits which");
  numerics->require_subcommand(1);

  auto* formats = numerics->add_subcommand("formats", "The format table: range, precision, special values");
  static bool formats_json = false;
  static std::string formats_extra;
  formats->add_flag("--json", formats_json, "Print JSON");
  formats->add_option("--formats", formats_extra, "A JSON file of more formats (data/numerics/formats.json's shape)");
  formats->callback([exit_code] { *exit_code = FormatsCommand(formats_json, formats_extra); });

  static FitArgs fit;
  auto* fit_cmd = numerics->add_subcommand(
      "fit", "Per tensor: the share of values that would overflow, flush to zero or be subnormal in a format");
  fit_cmd->add_option("RUN", fit.path, "A run directory (or any PATH diagnose reads)")->required();
  fit_cmd->add_option("--format", fit.formats, "fp16, bf16, fp8-e4m3, ... (comma-separated or repeated; 'all')");
  fit_cmd->add_option("--loss-scale", fit.loss_scale, "Scale gradients by this power of two first (4096, 2^12, auto)");
  fit_cmd->add_option("--steps", fit.steps, "Step range A:B");
  fit_cmd->add_option("--family", fit.families, "grad, weight, update, act, input (default: all)")->delimiter(',');
  fit_cmd->add_option("--top", fit.top, "Rows to print (text)");
  fit_cmd->add_option("--formats", fit.extra_formats, "A JSON file of more formats");
  fit_cmd->add_flag("--json", fit.json, "Print JSON");
  fit_cmd->callback([exit_code] { *exit_code = FitCommand(fit); });

  static FitArgs fp8;
  auto* fp8_cmd = numerics->add_subcommand(
      "fp8", "FP8 readiness per tensor: delayed per-tensor scaling, E4M3 forward, E5M2 backward");
  fp8_cmd->add_option("RUN", fp8.path, "A run directory")->required();
  fp8_cmd->add_option("--history", fp8.history, "amax history length, in recorded points (default 16)");
  fp8_cmd->add_option("--steps", fp8.steps, "Step range A:B");
  fp8_cmd->add_option("--top", fp8.top, "Rows to print (text)");
  fp8_cmd->add_option("--formats", fp8.extra_formats, "A JSON file of more formats");
  fp8_cmd->add_flag("--json", fp8.json, "Print JSON");
  fp8_cmd->callback([exit_code] { *exit_code = Fp8Command(fp8); });
}

}  // namespace trainscope::cli
