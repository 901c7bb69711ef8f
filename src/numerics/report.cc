#include "numerics/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/json_number.h"
#include "core/tag.h"

namespace trainscope::numerics {

using json = nlohmann::json;

std::string PatternHex(const FloatFormat& format, uint64_t pattern) {
  const int digits = (format.bits + 3) / 4;
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "0x%0*llx", digits, static_cast<unsigned long long>(pattern));
  return buffer;
}

std::string MaxFormula(const FloatFormat& f) {
  // max = 2^max_exponent * (2 - 2^-m) for ieee/fnuz/finite, (2 - 2^(1-m)) for fn.
  const int m = f.layout.mantissa_bits;
  const int gap = f.layout.encoding == Encoding::kFn ? 1 - m : -m;
  return "2^" + std::to_string(f.max_exponent) + " x (2 - 2^" + std::to_string(gap) + ")";
}

json FormatToJson(const FloatFormat& f) {
  json row = {{"name", f.name()},
              {"aliases", f.layout.aliases},
              {"bits", f.bits},
              {"sign_bits", 1},
              {"exponent_bits", f.layout.exponent_bits},
              {"mantissa_bits", f.layout.mantissa_bits},
              {"bias", f.bias},
              {"encoding", EncodingName(f.layout.encoding)},
              {"max", f.max_finite},
              {"max_formula", MaxFormula(f)},
              {"min_normal", f.min_normal},
              {"min_subnormal", f.min_subnormal},
              {"max_exponent", f.max_exponent},
              {"min_exponent", f.min_exponent},
              {"min_subnormal_exponent", f.min_exponent - f.layout.mantissa_bits},
              {"epsilon", f.epsilon},
              {"decimal_digits", f.decimal_digits},
              {"precision", f.precision},
              {"resolution", f.resolution},
              {"overflow_threshold", JsonNumber(f.overflow_threshold)},
              {"underflow_threshold", f.underflow_threshold == 0 ? json(nullptr) : json(f.underflow_threshold)},
              {"has_inf", f.has_inf},
              {"has_nan", f.has_nan},
              {"has_negative_zero", f.has_negative_zero},
              {"max_pattern", PatternHex(f, f.max_pattern)},
              {"inf_pattern", f.has_inf ? json(PatternHex(f, f.inf_pattern)) : json(nullptr)},
              {"nan_pattern", f.has_nan ? json(PatternHex(f, f.nan_pattern)) : json(nullptr)},
              {"nan_patterns", f.nan_pattern_count},
              {"torch", f.layout.torch_dtype.empty() ? json(nullptr) : json(f.layout.torch_dtype)},
              {"standard", f.layout.standard}};
  return row;
}

namespace {

json TensorFitJson(const TensorFit& t) {
  const FitCounts& c = t.counts;
  json row = {{"tag", t.tag},
              {"family", t.family},
              {"layer", t.layer},
              {"step_first", t.step_first},
              {"step_last", t.step_last},
              {"points", t.points},
              {"values", c.numel},
              {"overflow", c.Fraction(c.overflow_max)},
              {"underflow", c.Fraction(c.underflow_max)},
              {"subnormal", c.Fraction(c.subnormal_max)},
              {"overflow_min", c.Fraction(c.overflow_min)},
              {"underflow_min", c.Fraction(c.underflow_min)},
              {"subnormal_min", c.Fraction(c.subnormal_min)},
              {"lost", c.lost()},
              {"nonfinite", c.Fraction(c.nonfinite)},
              {"zeros", c.Fraction(c.zeros)},
              {"abs_max", JsonNumber(t.abs_max)},
              {"abs_max_step", t.abs_max_step},
              {"overflow_points", t.overflow_points},
              {"first_overflow_step", t.first_overflow_step >= 0 ? json(t.first_overflow_step) : json(nullptr)},
              {"worst_step", t.worst_step},
              {"worst_lost", t.worst_lost}};
  if (t.scale_exponent != 0) row["scale_exponent"] = t.scale_exponent;
  return row;
}

json FitCountsJson(const FitCounts& c) {
  return {{"overflow", c.Fraction(c.overflow_max)},   {"underflow", c.Fraction(c.underflow_max)},
          {"subnormal", c.Fraction(c.subnormal_max)}, {"overflow_min", c.Fraction(c.overflow_min)},
          {"underflow_min", c.Fraction(c.underflow_min)}, {"values", c.numel}};
}

std::vector<const TensorStatsSeries*> Gradients(const RunData& run) {
  std::vector<const TensorStatsSeries*> out;
  for (const TensorStatsSeries& s : run.tensor_stats) {
    if (tags::kGrad.Holds(s.tag)) out.push_back(&s);
  }
  return out;
}

}  // namespace

json FitToJson(const RunData& run, const FloatFormat& format, const FitOptions& options) {
  json out = {{"format", format.name()},
              {"loss_scale", std::ldexp(1.0, options.grad_scale_exponent)},
              {"loss_scale_exponent", options.grad_scale_exponent}};
  json tensors = json::array();
  for (const TensorFit& t : FitRun(run, format, options)) tensors.push_back(TensorFitJson(t));
  out["tensors"] = std::move(tensors);
  const LossScaleAdvice advice = RecommendLossScale(Gradients(run), format, options.step_min, options.step_max);
  if (advice.valid) {
    out["gradient_loss_scale"] = {{"recommended", std::ldexp(1.0, advice.k_recommended)},
                                  {"recommended_exponent", advice.k_recommended},
                                  {"exponent_low", advice.k_low},
                                  {"exponent_high", advice.k_high},
                                  {"largest_gradient", JsonNumber(advice.abs_max)},
                                  {"largest_gradient_tag", advice.abs_max_tag},
                                  {"largest_gradient_step", advice.abs_max_step},
                                  {"at_scale_1", FitCountsJson(advice.at_one)},
                                  {"at_recommended", FitCountsJson(advice.at_recommended)}};
  }
  return out;
}

json FitMatrixJson(const RunData& run, const std::vector<const FloatFormat*>& formats, const FitOptions& options) {
  struct Row {
    TensorFit first;
    std::vector<FitCounts> per_format;
    double worst = 0;
  };
  std::vector<Row> rows;
  std::vector<std::string> order;
  for (size_t k = 0; k < formats.size(); ++k) {
    for (const TensorFit& t : FitRun(run, *formats[k], options)) {
      auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.first.tag == t.tag; });
      if (it == rows.end()) {
        rows.push_back({t, std::vector<FitCounts>(formats.size()), 0});
        it = rows.end() - 1;
      }
      it->per_format[k] = t.counts;
      it->worst = std::max(it->worst, t.counts.lost());
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.worst != b.worst) return a.worst > b.worst;
    return a.first.tag < b.first.tag;
  });
  json names = json::array();
  for (const FloatFormat* f : formats) names.push_back(f->name());
  json out_rows = json::array();
  for (const Row& r : rows) {
    json lost = json::array(), overflow = json::array(), underflow = json::array(), subnormal = json::array();
    for (const FitCounts& c : r.per_format) {
      lost.push_back(c.lost());
      overflow.push_back(c.Fraction(c.overflow_max));
      underflow.push_back(c.Fraction(c.underflow_max));
      subnormal.push_back(c.Fraction(c.subnormal_max));
    }
    out_rows.push_back({{"tag", r.first.tag},
                        {"family", r.first.family},
                        {"layer", r.first.layer},
                        {"step_first", r.first.step_first},
                        {"step_last", r.first.step_last},
                        {"lost", lost},
                        {"overflow", overflow},
                        {"underflow", underflow},
                        {"subnormal", subnormal}});
  }
  return {{"formats", names}, {"loss_scale_exponent", options.grad_scale_exponent}, {"rows", out_rows}};
}

json Fp8ReadinessJson(const RunData& run, const FloatFormat& forward, const FloatFormat& backward, int history,
                      int64_t step_min, int64_t step_max) {
  struct Item {
    DelayedScalingFit fit;
    double lost;
  };
  std::vector<Item> items;
  for (const TensorStatsSeries& s : run.tensor_stats) {
    std::string family, layer;
    SplitTag(s.tag, &family, &layer);
    if (family != "act" && family != "weight" && family != "grad") continue;
    const FloatFormat& f = family == "grad" ? backward : forward;
    DelayedScalingFit fit = FitDelayedScaling(s, f, history, step_min, step_max);
    if (fit.points == 0) continue;
    items.push_back({fit, fit.histogram_points ? fit.counts.lost() : 0.0});
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.lost != b.lost) return a.lost > b.lost;
    if (a.fit.overflow_points != b.fit.overflow_points) return a.fit.overflow_points > b.fit.overflow_points;
    return a.fit.tag < b.fit.tag;
  });
  json tensors = json::array();
  for (const Item& item : items) {
    const DelayedScalingFit& d = item.fit;
    json amax = json::array();
    for (double a : d.amax_history) amax.push_back(JsonNumber(a));
    tensors.push_back({{"tag", d.tag},
                       {"family", d.family},
                       {"layer", d.layer},
                       {"format", d.format},
                       {"step_first", d.step_first},
                       {"step_last", d.step_last},
                       {"points", d.points},
                       {"histogram_points", d.histogram_points},
                       {"scale", std::ldexp(1.0, d.last_scale_exponent)},
                       {"scale_exponent", d.last_scale_exponent},
                       {"amax_history", amax},
                       {"overflow", d.counts.Fraction(d.counts.overflow_max)},
                       {"underflow", d.counts.Fraction(d.counts.underflow_max)},
                       {"subnormal", d.counts.Fraction(d.counts.subnormal_max)},
                       {"overflow_min", d.counts.Fraction(d.counts.overflow_min)},
                       {"lost", item.lost},
                       {"overflow_points", d.overflow_points},
                       {"first_overflow_step", d.first_overflow_step >= 0 ? json(d.first_overflow_step) : json(nullptr)},
                       {"worst_step", d.worst_step},
                       {"worst_lost", d.worst_lost}});
  }
  return {{"forward_format", forward.name()},
          {"backward_format", backward.name()},
          {"scaling", "delayed, per tensor, power-of-two scale"},
          {"history", history},
          {"tensors", tensors}};
}

}  // namespace trainscope::numerics
