// PrecisionFitDetector's end-of-run findings on formats: FP16_UNDERFLOW (gradients flushed
// to zero at the loss scale in use, with the scale that fixes it), FP8_READINESS (per tensor,
// delayed per-tensor scaling) and TF32_PRECISION (matmul inputs finer than TF32 resolves).
// The findings on updates are in precision_fit_updates.cc.
#include "doctor/detectors/numerics.h"

#ifdef TRAINSCOPE_WITH_NUMERICS
#include <algorithm>
#include <cmath>

#include "doctor/detectors/precision_fit_state.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;
using numerics::FitCounts;

}  // namespace

void PrecisionFitDetector::Finish(const DetectorContext& ctx) {
  const State& st = *state_;
  if (st.Fp16Active()) ReportUnderflow(ctx);
  ReportUpdates(ctx);
  if (st.declared.fp8 && !st.fp8.empty()) ReportFp8Readiness(ctx);
  if (st.declared.tf32) ReportTf32(ctx);
}

// FP16_UNDERFLOW: gradients flushed to zero at the loss scale in use.
void PrecisionFitDetector::ReportUnderflow(const DetectorContext& ctx) const {
  const State& st = *state_;
  FitCounts all;
  std::string worst_tag;
  double worst = 0;
  int64_t first_bad = -1, last_bad = -1;
  std::vector<numerics::MergedGradient> merged;
  for (const std::string& tag : st.grad_order) {
    const State::Under& u = st.grads.at(tag);
    if (!u.any) continue;
    all.Add(u.at_used_scale);
    merged.push_back(u.merged);
    const double share = u.at_used_scale.Fraction(u.at_used_scale.underflow_min);
    // Ties (two tensors all flushed) go to the larger, then the first by name: online and
    // offline see gradients in different orders and must name the same one.
    const bool tie = share == worst && !worst_tag.empty();
    const uint64_t numel = u.at_used_scale.numel, worst_numel = tie ? st.grads.at(worst_tag).at_used_scale.numel : 0;
    if (share > worst || (tie && (numel > worst_numel || (numel == worst_numel && tag < worst_tag)))) {
      worst = share;
      worst_tag = tag;
    }
    if (u.first_bad >= 0 && (first_bad < 0 || u.first_bad < first_bad)) first_bad = u.first_bad;
    last_bad = std::max(last_bad, u.last_bad);
  }
  const double total = all.Fraction(all.underflow_min);
  if (!merged.empty() && (total >= options_.underflow_fraction || worst >= options_.underflow_tensor_fraction)) {
    const numerics::LossScaleAdvice a = numerics::RecommendLossScaleMerged(
        merged, st.grad_abs_max, st.grad_abs_max_tag, st.grad_abs_max_step, *st.fp16);
    const State::Under& w = st.grads.at(worst_tag);
    std::string family, layer;
    numerics::SplitTag(worst_tag, &family, &layer);
    Finding f;
    f.code = "FP16_UNDERFLOW";
    f.severity = Severity::kWarning;
    f.step = first_bad >= 0 ? first_bad : w.first;
    f.last_step = std::max(f.step, last_bad >= 0 ? last_bad : w.last);
    f.location = layer;
    const double scale = std::ldexp(1.0, a.k_recommended);
    const std::string used = st.loss_scaling ? "at the loss scale in use (2^" + std::to_string(st.used_scale_exponent_min) +
                                                   (st.used_scale_exponent_max != st.used_scale_exponent_min
                                                        ? "..2^" + std::to_string(st.used_scale_exponent_max)
                                                        : "") + ")"
                                             : "unscaled";
    f.summary = FormatNumber(100 * total, 3) + " % of gradient values flush to zero in float16 " + used +
                " (below 2^-25, half the smallest subnormal 2^-24); worst " + worst_tag + ": " +
                FormatNumber(100 * worst, 3) + " %. A loss scale of 2^" + std::to_string(a.k_recommended) + " (" +
                FormatNumber(scale, 8) + ") leaves " +
                FormatNumber(100 * a.at_recommended.Fraction(a.at_recommended.underflow_max), 3) +
                " % flushed and overflows nothing (largest gradient " + FormatNumber(a.abs_max, 4) + " in " +
                a.abs_max_tag + ")";
    f.evidence_json = json{{"tensor", worst_tag},
                           {"fraction", Num(worst)},
                           {"fraction_all_gradients", Num(total)},
                           {"subnormal_fraction_all_gradients", Num(all.Fraction(all.subnormal_max))},
                           {"steps", json::array({w.first, w.last})},
                           {"loss_scale_in_use", st.loss_scaling ? Num(st.loss_scale) : json(1.0)},
                           {"largest_gradient", Num(a.abs_max)},
                           {"largest_gradient_tensor", a.abs_max_tag},
                           {"largest_gradient_step", a.abs_max_step},
                           {"recommended_loss_scale", Num(scale)},
                           {"recommended_exponent", a.k_recommended},
                           {"exponent_range", json::array({a.k_low, a.k_high})},
                           {"flushed_at_recommended", Num(a.at_recommended.Fraction(a.at_recommended.underflow_max))},
                           {"overflow_at_recommended", Num(a.at_recommended.Fraction(a.at_recommended.overflow_max))},
                           {"precision", st.Fp16Why()}}
                        .dump();
    f.causes = {{"precision_overflow", 0.6}};
    f.actions = {"Scale the loss by 2^" + std::to_string(a.k_recommended) + " = " + FormatNumber(scale, 8) +
                     ": torch.cuda.amp.GradScaler(init_scale=" + FormatNumber(scale, 8) +
                     ") starts there, or multiply the loss by it and divide the gradients by it before the step "
                     "(any 2^k for k in " + std::to_string(a.k_low) + ".." + std::to_string(a.k_high) +
                     " keeps the largest gradient below 65504 with 2x to spare)",
                 "Or train in bfloat16: float32's exponent range, nothing above 2^-133 flushes"};
    ctx.Report(std::move(f));
  }
}

// FP8_READINESS: only when the run considers FP8.
void PrecisionFitDetector::ReportFp8Readiness(const DetectorContext& ctx) const {
  const State& st = *state_;
  struct Row {
    std::string tag;
    const State::Fp8* f;
    double lost;
  };
  std::vector<Row> rows;
  for (const auto& [tag, f] : st.fp8) rows.push_back({tag, &f, f.histogram_points ? f.counts.lost() : 0.0});
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.lost != b.lost) return a.lost > b.lost;
    return a.f->overflow_points > b.f->overflow_points;
  });
  const Row& worst = rows.front();
  json layers = json::array();
  size_t losing = 0;
  for (const Row& r : rows) {
    if (r.lost > options_.fp8_lost_warning) ++losing;
    if (layers.size() >= 12) continue;
    json amax = json::array();
    for (double a : r.f->window) amax.push_back(Num(a));
    layers.push_back({{"tensor", r.tag}, {"format", r.f->format->name()}, {"lost", Num(r.lost)},
                      {"overflow", Num(r.f->counts.Fraction(r.f->counts.overflow_max))},
                      {"underflow", Num(r.f->counts.Fraction(r.f->counts.underflow_max))},
                      {"stale_scale_steps", r.f->overflow_points}, {"points", r.f->points},
                      {"scale_exponent", r.f->window.empty() ? r.f->last_k
                                                             : numerics::DelayedScaleExponent(
                                                                   *std::max_element(r.f->window.begin(), r.f->window.end()),
                                                                   *r.f->format)},
                      {"amax_history", amax}});
  }
  std::string family, layer;
  numerics::SplitTag(worst.tag, &family, &layer);
  Finding f;
  f.code = "FP8_READINESS";
  f.severity = losing > 0 ? Severity::kWarning : Severity::kInfo;
  f.step = worst.f->first;
  f.last_step = worst.f->last;
  f.location = layer;
  f.summary = "FP8 with delayed per-tensor scaling (amax history " + std::to_string(options_.fp8_history) +
              " recorded steps; E4M3 forward, E5M2 backward): " + std::to_string(losing) + " of " +
              std::to_string(rows.size()) + " tensors lose more than " +
              FormatNumber(100 * options_.fp8_lost_warning, 3) + " % of their values; worst " + worst.tag + " (" +
              worst.f->format->name() + "): " + FormatNumber(100 * worst.lost, 3) + " % lost, scale stale at " +
              std::to_string(worst.f->overflow_points) + " of " + std::to_string(worst.f->points) + " steps";
  f.evidence_json = json{{"tensor", worst.tag}, {"history", options_.fp8_history}, {"layers", layers},
                         {"precision", st.declared.fp8_why}}
                        .dump();
  f.causes = {{"precision_overflow", 0.4}};
  f.actions = {"Keep the layers that lose most (" + layer + ") in bfloat16; convert the rest to FP8",
               "A longer amax history, or a margin of one or two binades on the scale, for tensors whose amax "
               "grows between steps (stale-scale steps)",
               "Tensors that flush small values need a finer scale than one per tensor (per-channel or MX blocks "
               "of 32)"};
  ctx.Report(std::move(f));
}

// TF32_PRECISION: matmul inputs whose spread is finer than TF32's mantissa resolves.
void PrecisionFitDetector::ReportTf32(const DetectorContext& ctx) const {
  const State& st = *state_;
  std::vector<std::pair<std::string, const State::Tf32*>> notes;
  for (const auto& [module, t] : st.tf32) {
    if (t.bits > options_.tf32_mantissa_bits) notes.push_back({module, &t});
  }
  std::stable_sort(notes.begin(), notes.end(), [](const auto& a, const auto& b) { return a.second->bits > b.second->bits; });
  if (!notes.empty()) {
    const auto& [module, t] = notes.front();
    json layers = json::array();
    for (size_t i = 0; i < notes.size() && i < 10; ++i) {
      layers.push_back({{"module", notes[i].first}, {"input", notes[i].second->input},
                        {"mantissa_bits_needed", Num(notes[i].second->bits)}, {"input_mean", Num(notes[i].second->mean)},
                        {"input_std", Num(notes[i].second->std)}, {"step", notes[i].second->step}});
    }
    Finding f;
    f.code = "TF32_PRECISION";
    f.severity = Severity::kInfo;
    f.step = t->step;
    f.last_step = t->step;
    f.location = module;
    f.summary = "The input of " + module + " (" + t->input + ": mean " + FormatNumber(t->mean, 4) + ", std " +
                FormatNumber(t->std, 4) + ") varies by 2^-" + FormatNumber(std::log2(std::fabs(t->mean) / t->std), 3) +
                " of its magnitude: resolving that needs about " + FormatNumber(t->bits, 3) +
                " mantissa bits, TF32 rounds matmul inputs to 10";
    f.evidence_json = json{{"module", module}, {"layers", layers}, {"precision", st.declared.tf32_why}}.dump();
    f.causes = {{"unnormalized_input", 0.5}};
    f.actions = {"Centre the input of " + module + " (subtract its mean, or a norm layer before it): TF32's "
                 "relative error 2^-11 then applies to the signal, not to its offset",
                 "Or keep this matmul in full float32: torch.backends.cuda.matmul.allow_tf32 = False "
                 "(torch.set_float32_matmul_precision('highest'))"};
    ctx.Report(std::move(f));
  }
}

}  // namespace trainscope::doctor
#endif  // TRAINSCOPE_WITH_NUMERICS
