// PrecisionFitDetector's step-by-step tracking: the run's declared precision and loss scale,
// the float16 cast fingerprint, activations and gradients past float16's range (reported
// as FP16_OVERFLOW once float16 is in use), gradient underflow counts, FP8 delayed scaling
// and TF32 matmul inputs. The end-of-run findings are in precision_fit_findings.cc.
#include "doctor/detectors/numerics.h"

#ifdef TRAINSCOPE_WITH_NUMERICS
#include <algorithm>
#include <cmath>

#include "core/tag.h"
#include "doctor/detectors/precision_fit_state.h"

namespace trainscope::doctor {

namespace {

using numerics::FitCounts;
using numerics::FitStats;

bool IsMatmulModule(const std::string& module, const std::string& type) {
  const std::string t = Lower(type.empty() ? module : type);
  for (const char* word : {"linear", "conv", "attention", "fc", "proj", "dense", "head", "lm_head", "embed"}) {
    if (t.find(word) != std::string::npos) return word != std::string("embed");  // embeddings are lookups, not matmuls
  }
  return false;
}

}  // namespace

PrecisionFitDetector::PrecisionFitDetector(PrecisionFitOptions options)
    : options_(options), state_(std::make_unique<State>()) {}
PrecisionFitDetector::~PrecisionFitDetector() = default;

void PrecisionFitDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  State& st = *state_;
  const RunFacts& facts = ctx.facts;
  st.ReadRunSettings(facts, frame);
  const std::string& skip_tag = facts.roles.Get(Role::kOverflowSkip);
  const double* skip = skip_tag.empty() ? nullptr : frame.Scalar(skip_tag);
  const bool skipped = skip && *skip > 0;
  if (!st.cast_signature) st.FindCastSignature(frame);
  if (st.nonfinite_step < 0) st.FindFirstNonfinite(frame, skipped);
  const bool after_nonfinite = st.nonfinite_step >= 0 && frame.step > st.nonfinite_step;
  const bool fp16 = st.Fp16Active();
  const int used_k = st.loss_scaling ? static_cast<int>(std::floor(std::log2(st.loss_scale))) : 0;
  const double lr = facts.lr;
  for (const auto& [tag, s] : frame.stats) {
    const bool act = tags::kAct.Holds(tag);
    const bool grad = tags::kGrad.Holds(tag);
    if ((act || (grad && !skipped)) && !after_nonfinite) st.TrackOverflow(tag, s, frame.step);
    if (grad && !skipped) st.TrackGradient(tag, s, frame.step, used_k, options_);
    st.TrackUpdate(tag, s, frame, skipped, lr, options_);
    // FP8 readiness, only when the run considers FP8.
    if (st.declared.fp8 && (act || grad || tags::kWeight.Holds(tag))) st.TrackFp8(tag, s, grad, frame.step, options_);
  }
  if (st.declared.tf32 && facts.module_order.size() >= 2) st.TrackTf32(facts, frame);
  if (!fp16) return;
  st.ReportOverflows(ctx);
}

void PrecisionFitDetector::State::ReadRunSettings(const RunFacts& facts, const StepFrame& frame) {
  if (facts.meta.size() != meta_seen) {
    meta_seen = facts.meta.size();
    declared = ParseDeclaredPrecision(facts.meta);
  }
  const std::string& scale_tag = facts.roles.Get(Role::kLossScale);
  if (const double* v = scale_tag.empty() ? nullptr : frame.Scalar(scale_tag)) {
    if (std::isfinite(*v) && *v > 0) {
      loss_scaling = true;
      loss_scale = *v;
    }
  }
}

// The fingerprint of a float16 cast: an activation has Inf while its finite values all fit
// float16 (<= 65504), and the activation just before it in forward order has finite values
// past float16's range but far inside float32's (< 2^32): the cast made the Inf. An FP32
// blow-up makes Inf from values near 3.4e38, and leaves huge finite ones beside.
void PrecisionFitDetector::State::FindCastSignature(const StepFrame& frame) {
  const double fp16_limit = fp16->overflow_threshold;
  const std::pair<std::string, TensorStats>* previous = nullptr;
  for (const auto& item : frame.stats) {
    if (!tags::kAct.Holds(item.first)) continue;
    const TensorStats& s = item.second;
    if (previous && s.inf > 0 && s.abs_max <= fp16->max_finite) {
      const TensorStats& p = previous->second;
      if (p.inf == 0 && p.nan == 0 && p.abs_max >= fp16_limit && p.abs_max < 4294967296.0) {
        cast_signature = true;
        cast_why = item.first + " turned Inf at step " + std::to_string(frame.step) + " with its finite values "
                   "within float16's range, right after " + previous->first + " reached " +
                   FormatNumber(p.abs_max, 6) + ", past float16's 65504: a cast to float16";
        break;
      }
    }
    previous = &item;
  }
}

// Once weights or gradients are non-finite, later values are the consequence: no new
// overflow opens after that step (NONFINITE_* tells that story).
void PrecisionFitDetector::State::FindFirstNonfinite(const StepFrame& frame, bool skipped) {
  for (const auto& [tag, s] : frame.stats) {
    if ((tags::kWeight.Holds(tag) || tags::kGrad.Holds(tag)) && s.nan + s.inf > 0 && !skipped) {
      nonfinite_step = frame.step;
      break;
    }
  }
}

// FP16_OVERFLOW: the first point of each activation or gradient past the range.
void PrecisionFitDetector::State::TrackOverflow(const std::string& tag, const TensorStats& s, int64_t step) {
  if (s.finite() > s.zeros && std::isfinite(s.abs_max) && s.abs_max >= fp16->overflow_threshold &&
      !overflow_reported.count(tag) && !overflow_pending.count(tag)) {
    Over o;
    o.tag = tag;
    o.step = step;
    o.abs_max = s.abs_max;
    o.has_histogram = s.has_histogram;
    o.counts = FitStats(s, *fp16, 0);
    overflow_pending[tag] = o;
  }
}

void PrecisionFitDetector::State::TrackGradient(const std::string& tag, const TensorStats& s, int64_t step, int used_k,
                                                const PrecisionFitOptions& options) {
  auto [it, fresh] = grads.try_emplace(tag);
  if (fresh) {
    grad_order.push_back(tag);
    it->second.merged.tag = tag;
  }
  Under& u = it->second;
  if (s.finite() > s.zeros && std::isfinite(s.abs_max) && s.abs_max > grad_abs_max) {
    grad_abs_max = s.abs_max;
    grad_abs_max_tag = tag;
    grad_abs_max_step = step;
  }
  if (s.has_histogram) {
    MergeTensorStats(u.merged.merged, s);
    const FitCounts c = FitStats(s, *fp16, used_k);
    if (!u.any) u.first = step;
    u.any = true;
    u.last = step;
    u.at_used_scale.Add(c);
    used_scale_exponent_min = std::min(used_scale_exponent_min, used_k);
    used_scale_exponent_max = std::max(used_scale_exponent_max, used_k);
    if (c.Fraction(c.underflow_min) >= options.underflow_tensor_fraction) {
      if (u.first_bad < 0) u.first_bad = step;
      u.last_bad = step;
    }
  }
}

void PrecisionFitDetector::State::TrackFp8(const std::string& tag, const TensorStats& s, bool grad, int64_t step,
                                           const PrecisionFitOptions& options) {
  Fp8& f = fp8[tag];
  f.format = grad ? e5m2 : e4m3;
  const double amax = s.finite() > s.zeros && std::isfinite(s.abs_max) ? s.abs_max : 0.0;
  double reference = amax;
  if (!f.window.empty()) reference = *std::max_element(f.window.begin(), f.window.end());
  const int k = numerics::DelayedScaleExponent(reference > 0 ? reference : amax, *f.format);
  if (f.points == 0) f.first = step;
  f.last = step;
  ++f.points;
  f.last_k = k;
  if (amax > 0 && std::ldexp(amax, k) >= f.format->overflow_threshold) {
    ++f.overflow_points;
    if (f.first_overflow < 0) f.first_overflow = step;
  }
  if (s.has_histogram) {
    const FitCounts c = FitStats(s, *f.format, k);
    f.counts.Add(c);
    if (f.histogram_points == 0 || c.lost() > f.worst_lost) {
      f.worst_lost = c.lost();
      f.worst_step = step;
    }
    ++f.histogram_points;
  }
  if (amax > 0) f.window.push_back(amax);
  while (static_cast<int>(f.window.size()) > std::max(1, options.fp8_history)) f.window.pop_front();
}

// TF32: the input of each matmul module is the previous module's output in forward order.
void PrecisionFitDetector::State::TrackTf32(const RunFacts& facts, const StepFrame& frame) {
  for (size_t i = 1; i < facts.module_order.size(); ++i) {
    const std::string& module = facts.module_order[i];
    if (!IsMatmulModule(module, facts.ModuleType(module))) continue;
    const TensorStats* in = frame.Stats(tags::kAct.Of(facts.module_order[i - 1]));
    if (!in || in->finite() < 2) continue;
    const double mean = in->mean();
    const double sd = in->stddev();
    if (!(sd > 0) || !std::isfinite(mean) || mean == 0) continue;
    const double bits = std::log2(std::fabs(mean) / sd) + 3;
    Tf32& t = tf32[module];
    if (bits > t.bits) t = {bits, mean, sd, frame.step, tags::kAct.Of(facts.module_order[i - 1])};
  }
}

void PrecisionFitDetector::State::ReportOverflows(const DetectorContext& ctx) {
  for (auto it = overflow_pending.begin(); it != overflow_pending.end();) {
    ctx.Report(OverflowFinding(it->second));
    overflow_reported.insert(it->first);
    it = overflow_pending.erase(it);
  }
}

Finding PrecisionFitDetector::State::OverflowFinding(const Over& o) const {
  std::string family, layer;
  numerics::SplitTag(o.tag, &family, &layer);
  const bool is_act = family == "act";
  Finding f;
  f.code = "FP16_OVERFLOW";
  f.severity = Severity::kWarning;
  f.step = o.step;
  f.last_step = o.step;
  f.location = layer;
  const double over_max = o.counts.Fraction(o.counts.overflow_max);
  const double over_min = o.counts.Fraction(o.counts.overflow_min);
  std::string share = o.has_histogram
                          ? (over_min == over_max ? FormatNumber(100 * over_max, 3) + " %"
                                                  : FormatNumber(100 * over_min, 3) + "-" +
                                                        FormatNumber(100 * over_max, 3) + " %") +
                                " of its values"
                          : "at least its largest value";
  f.summary = std::string(is_act ? "Activations of " : "Gradients of ") + layer + " reach " +
              FormatNumber(o.abs_max, 6) + " at step " + std::to_string(o.step) +
              ", past float16's largest value 65504 (" + FormatNumber(o.abs_max / fp16->max_finite, 3) +
              "x): " + share + " become Inf in float16";
  nlohmann::json ev = {{"tensor", o.tag},
                       {"family", family},
                       {"step", o.step},
                       {"largest_value", Num(o.abs_max)},
                       {"float16_max", fp16->max_finite},
                       {"overflow_threshold", fp16->overflow_threshold},
                       {"times_over", Num(o.abs_max / fp16->max_finite)},
                       {"precision", Fp16Why()}};
  if (o.has_histogram) {
    ev["fraction"] = Num(over_max);
    ev["fraction_min"] = Num(over_min);
  } else {
    ev["fraction"] = nullptr;
    ev["fraction_note"] = "no exponent histogram at this step (watch's histograms_every): at least one value";
  }
  f.evidence_json = ev.dump();
  f.causes = {{"precision_overflow", 0.8}};
  if (is_act) {
    f.causes.push_back({"unnormalized_input", 0.2});
    f.actions = {"Keep " + layer + " in float32: run it outside autocast (with torch.autocast(device_type, "
                 "enabled=False): ... x.float()), or do not cast its output to float16",
                 "Bound what feeds " + layer + ": normalise its input (a LayerNorm before it, standardised "
                 "features) so its outputs stay well below 65504 (now " + FormatNumber(o.abs_max, 4) + ")",
                 "Or train in bfloat16, which has float32's range (max 3.4e38)"};
  } else {
    f.causes.push_back({"gradient_explosion", 0.3});
    f.actions = {"Use dynamic loss scaling (torch.cuda.amp.GradScaler): it lowers the scale when scaled "
                 "gradients overflow and skips that step",
                 "Clip gradients (torch.nn.utils.clip_grad_norm_) or lower the LR: " + layer + "'s gradients reach " +
                     FormatNumber(o.abs_max, 4),
                 "Or train in bfloat16 (float32's range)"};
  }
  return f;
}

}  // namespace trainscope::doctor
#endif  // TRAINSCOPE_WITH_NUMERICS
