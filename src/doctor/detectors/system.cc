#include "doctor/detectors/system.h"

#include <algorithm>
#include <cmath>

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

}  // namespace

bool StepTimes(const StepFrame& frame, double* data_wait, double* step) {
  double data = kNaN, total = kNaN, phases = 0;
  bool any = false;
  for (const auto& [tag, v] : frame.scalars) {
    std::string_view phase;
    if (!HasPrefix(tag, "time/", &phase) || !std::isfinite(v)) continue;
    any = true;
    if (phase == "step") total = v;
    else {
      if (phase == "data") data = v;
      phases += v;
    }
  }
  if (!any) {
    for (const Span& s : frame.spans) {
      any = true;
      if (s.phase == "step") total = s.duration;
      else {
        if (s.phase == "data") data = std::isnan(data) ? s.duration : data + s.duration;
        phases += s.duration;
      }
    }
  }
  if (!any) return false;
  *data_wait = data;
  *step = std::isnan(total) ? phases : total;
  return true;
}

void DataloaderDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  double wait, step;
  if (!StepTimes(frame, &wait, &step) || std::isnan(wait) || !(step > 0)) return;
  if (++seen_ <= options_.skip) return;
  window_.emplace_back(wait, step);
  steps_.push_back(frame.step);
  if (window_.size() > options_.window) {
    window_.pop_front();
    steps_.pop_front();
  }
  if (window_.size() < options_.window) return;
  std::vector<double> shares, waits, totals;
  for (const auto& [w, s] : window_) {
    shares.push_back(w / s);
    waits.push_back(w);
    totals.push_back(s);
  }
  const double share = Median(shares), med_wait = Median(waits), med_step = Median(totals);
  if (share <= options_.share || med_wait < options_.min_wait_seconds) return;
  Finding f;
  f.code = "DATALOADER_BOTTLENECK";
  f.severity = Severity::kWarning;
  f.step = steps_.front();
  f.last_step = frame.step;
  f.location = "data";
  f.summary = "the training waits for data " + FormatNumber(100 * share, 3) + "% of each step (" + FormatNumber(1e3 * med_wait, 3) + " ms of " +
              FormatNumber(1e3 * med_step, 3) + " ms, median over " + std::to_string(options_.window) + " steps)";
  f.evidence_json = json{{"data_share", Num(share)}, {"data_wait_ms", Num(1e3 * med_wait)},
                         {"step_ms", Num(1e3 * med_step)}, {"threshold", options_.share}}.dump();
  f.causes = {{"slow_dataloader", 0.9}};
  ctx.Report(std::move(f));
}

void MemoryLeakDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  for (const auto& [tag, v] : frame.scalars) {
    if (!std::isfinite(v)) continue;
    if (tag == "mem/rss" || tag == "mem/cuda_allocated") {
      memory_[tag].steps.push_back(static_cast<double>(frame.step));
      memory_[tag].values.push_back(v);
    } else if (HasPrefix(tag, "census/")) {
      census_[tag].steps.push_back(static_cast<double>(frame.step));
      census_[tag].values.push_back(v);
    }
  }
  if (++frames_ % options_.eval_every == 0) Check(ctx);
}

void MemoryLeakDetector::Finish(const DetectorContext& ctx) { Check(ctx); }

void MemoryLeakDetector::Check(const DetectorContext& ctx) {
  for (const auto& [tag, s] : memory_) {
    if (reported_.count(tag)) continue;
    const size_t n = s.values.size();
    const size_t skip = std::max(options_.warmup, static_cast<size_t>(options_.warmup_fraction * n));
    if (n < skip + options_.min_points) continue;
    std::span<const double> xs(s.steps.data() + skip, n - skip), ys(s.values.data() + skip, n - skip);
    const SlopeFit fit = RobustSlope(xs, ys);
    const double growth = fit.slope * (xs.back() - xs.front());
    const double level = Median(ys);
    const bool cuda = tag == "mem/cuda_allocated";
    const bool big = cuda ? growth >= options_.cuda_min_growth
                          : growth >= options_.min_growth && growth >= options_.rel_growth * level;
    if (fit.trend_z < options_.trend_z || !big) continue;
    reported_.insert(tag);
    // Which object type grows with it.
    std::string growing;
    double growing_slope = 0, growing_z = 0;
    for (const auto& [ctag, c] : census_) {
      if (c.values.size() < 10) continue;
      const size_t cskip = c.values.size() / 5;
      const SlopeFit cf = RobustSlope(std::span<const double>(c.steps.data() + cskip, c.steps.size() - cskip),
                                      std::span<const double>(c.values.data() + cskip, c.values.size() - cskip));
      if (cf.slope >= options_.census_slope && cf.trend_z >= options_.census_z && cf.slope > growing_slope) {
        growing = ctag.substr(7);
        growing_slope = cf.slope;
        growing_z = cf.trend_z;
      }
    }
    Finding f;
    f.code = "MEMORY_LEAK";
    f.severity = Severity::kWarning;
    f.step = static_cast<int64_t>(xs.front());
    f.last_step = static_cast<int64_t>(xs.back());
    f.location = tag;
    f.summary = tag + " grows ~" + FormatNumber(fit.slope / 1e6, 3) + " MB/step since step " + std::to_string(f.step) + " (+" +
                FormatNumber(growth / 1e6, 3) + " MB; Theil-Sen slope, Mann-Kendall z " + FormatNumber(fit.trend_z, 3) + ")" +
                (growing.empty() ? "" : "; " + growing + " objects grow +" + FormatNumber(growing_slope, 3) + " per step");
    json ev = {{"slope_bytes_per_step", Num(fit.slope)}, {"intercept", Num(fit.intercept)}, {"trend_z", Num(fit.trend_z)},
               {"growth_bytes", Num(growth)}, {"since_step", f.step}, {"level_bytes", Num(level)}};
    if (!growing.empty()) ev["growing_type"] = {{"type", growing}, {"per_step", Num(growing_slope)}, {"trend_z", Num(growing_z)}};
    f.evidence_json = ev.dump();
    std::vector<Cause> causes;
    const bool tensors = growing.find("Tensor") != std::string::npos || growing.find("tensor") != std::string::npos;
    RaiseCause(&causes, "retained_graph", tensors || cuda ? 0.7 : 0.4);
    if (!growing.empty() && !tensors) RaiseCause(&causes, "growing_python_objects", 0.6);
    f.causes = causes;
    ctx.Report(std::move(f));
  }
}

void ThroughputDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  double wait, step;
  if (!StepTimes(frame, &wait, &step) || !(step > 0)) return;
  const size_t i = seen_++;
  if (i < options_.skip) return;
  if (base_.size() < options_.baseline) {
    base_.push_back(step);
    return;
  }
  recent_.emplace_back(frame.step, step);
  if (recent_.size() > options_.window) recent_.pop_front();
  if (recent_.size() < options_.window) return;
  std::vector<double> r;
  for (const auto& p : recent_) r.push_back(p.second);
  const double base = Median(base_), now = Median(r);
  if (!(base > 0) || now < options_.ratio * base || now - base < options_.min_increase_seconds) return;
  Finding f;
  f.code = "THROUGHPUT_DROP";
  f.severity = now >= options_.warning_ratio * base && now - base >= options_.warning_increase_seconds
                   ? Severity::kWarning
                   : Severity::kInfo;
  f.step = recent_.front().first;
  f.last_step = frame.step;
  f.location = "time/step";
  f.summary = "steps take " + FormatNumber(now / base, 3) + "x as long as early in the run (" + FormatNumber(1e3 * now, 3) + " ms against " +
              FormatNumber(1e3 * base, 3) + " ms)";
  f.evidence_json = json{{"step_ms", Num(1e3 * now)}, {"baseline_step_ms", Num(1e3 * base)}, {"ratio", Num(now / base)}}.dump();
  f.causes = {{"retained_graph", 0.3}, {"slow_dataloader", 0.2}, {"host_contention", 0.3}};
  ctx.Report(std::move(f));
}

}  // namespace trainscope::doctor
