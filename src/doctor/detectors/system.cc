#include "doctor/detectors/system.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/tag.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

}  // namespace

bool StepTimes(const StepFrame& frame, double* data_wait, double* step) {
  double data = kNaN, total = kNaN, phases = 0;
  bool any = false;
  for (const auto& [tag, v] : frame.scalars) {
    std::string_view phase;
    if (!tags::kTime.Holds(tag, &phase) || !std::isfinite(v)) continue;
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

void PageFaultDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const double* kernel = frame.Scalar(tags::kMemKernelSeconds);
  const double* faults = frame.Scalar(tags::kMemPageFaults);
  double wait, step;
  if (!kernel || !faults || !StepTimes(frame, &wait, &step) || !(step > 0) || !std::isfinite(*kernel) ||
      !std::isfinite(*faults)) {
    return;
  }
  if (++seen_ <= options_.skip) return;
  window_.push_back({frame.step, *kernel, *faults, step});
  if (window_.size() > options_.window) window_.pop_front();
  if (window_.size() < options_.window) return;
  std::vector<double> shares, fault_counts, kernel_times, steps;
  for (const Point& p : window_) {
    shares.push_back(p.kernel_seconds / p.step_seconds);
    fault_counts.push_back(p.faults);
    kernel_times.push_back(p.kernel_seconds);
    steps.push_back(p.step_seconds);
  }
  const double share = Median(shares), per_step = Median(fault_counts);
  if (share <= options_.share || per_step < options_.min_faults) return;
  const double megabytes = per_step * 4096 / 1e6;
  Finding f;
  f.code = "HOST_PAGE_FAULTS";
  f.severity = Severity::kWarning;
  f.step = window_.front().step;
  f.last_step = frame.step;
  f.location = "host memory";
  f.summary = "the training thread spends " + FormatNumber(100 * share, 3) + "% of each step in the kernel, taking " +
              std::to_string(std::llround(per_step)) + " page faults (" + FormatNumber(megabytes, 3) +
              " MB of fresh pages) a step: the allocator gives freed tensor memory back to the system and faults it "
              "in again (median over " + std::to_string(options_.window) + " steps)";
  f.evidence_json = json{{"kernel_share", Num(share)},
                         {"page_faults_per_step", Num(per_step)},
                         {"fresh_megabytes_per_step", Num(megabytes)},
                         {"kernel_ms", Num(1e3 * Median(kernel_times))},
                         {"step_ms", Num(1e3 * Median(steps))},
                         {"threshold", options_.share}}
                        .dump();
  // The counters cannot tell anonymous memory from file pages: a memory-mapped dataset read
  // on the training thread faults too, once per page it touches.
  f.causes = {{"allocator_returns_memory", 0.8}, {"memory_mapped_data", 0.2}};
  ctx.Report(std::move(f));
}

void MemoryLeakDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  // trainscope's own memory (its buffers, the recorder's queue) is not the training's: a
  // series under mem/trainscope (e.g. mem/trainscope_rss) is taken out of the process RSS.
  for (const auto& [tag, v] : frame.scalars) {
    std::string_view what;
    if (tags::kMem.Holds(tag, &what) && HasPrefix(what, "trainscope") && std::isfinite(v)) own_rss_ = v;
  }
  if (frame.wall_time > 0) {
    if (std::isnan(first_wall_)) first_wall_ = frame.wall_time;
    last_wall_ = frame.wall_time;
  }
  for (const auto& [tag, v] : frame.scalars) {
    if (!std::isfinite(v)) continue;
    Series* s = nullptr;
    if (tag == tags::kMemRss || tag == tags::kMemCudaAllocated) s = &At(memory_, tag);
    else if (tags::kCensus.Holds(tag)) s = &At(census_, tag);
    if (!s || !s->thin.Admit()) continue;
    s->steps.push_back(static_cast<double>(frame.step));
    s->values.push_back(tag == tags::kMemRss ? v - own_rss_ : v);
    s->thin.Trim(s->steps, s->values);
  }
  if (CheckDue(++frames_, options_.eval_every)) Check(ctx, false);
}

void MemoryLeakDetector::Finish(const DetectorContext& ctx) { Check(ctx, true); }

void MemoryLeakDetector::Check(const DetectorContext& ctx, bool final) {
  for (const auto& [tag, s] : memory_) {
    // A reported leak is re-measured at each check and at the end: the finding says how
    // far it has gone now (its step and detected_at stay), not where it stood when found.
    const bool update = reported_.count(tag) > 0;
    const size_t n = s.values.size();
    const size_t skip = std::max(options_.warmup, static_cast<size_t>(options_.warmup_fraction * n));
    if (n < skip + options_.min_points) continue;
    std::span<const double> xs(s.steps.data() + skip, n - skip), ys(s.values.data() + skip, n - skip);
    const SlopeFit fit = RobustSlope(xs, ys);
    const double growth = fit.slope * (xs.back() - xs.front());
    const double level = Median(ys);
    const bool cuda = tag == tags::kMemCudaAllocated;
    auto big = [&](double bytes) {
      return cuda ? bytes >= options_.cuda_min_growth
                  : bytes >= options_.min_growth && bytes >= options_.rel_growth * level;
    };
    // The growth as measured, end level against start level (medians of a few points, so
    // one noisy sample does not decide).
    const size_t ends = std::min<size_t>(5, ys.size() / 2);
    const double measured = Median(ys.subspan(ys.size() - ends)) - Median(ys.first(ends));
    // Sustained: the recent part of the run still climbs.
    const size_t recent = std::min(ys.size(), std::max(options_.min_points / 2,
                                                       static_cast<size_t>(options_.recent_fraction * ys.size())));
    const SlopeFit recent_fit = RobustSlope(xs.subspan(xs.size() - recent), ys.subspan(ys.size() - recent));
    // And it climbs through the whole recent window, not in one step inside it: the
    // medians of its three thirds rise one after the other, each by a real share of what
    // the whole fit predicts over a third (a step up leaves two thirds level).
    const size_t third = recent / 3;
    bool climbs_throughout = third >= 3;
    if (climbs_throughout) {
      const auto tail = ys.subspan(ys.size() - 3 * third);
      const double m1 = Median(tail.subspan(0, third)), m2 = Median(tail.subspan(third, third)),
                   m3 = Median(tail.subspan(2 * third, third));
      const double expected = fit.slope * (xs.back() - xs[xs.size() - 3 * third]) / 3;
      climbs_throughout = m2 - m1 >= options_.recent_slope_fraction * expected &&
                          m3 - m2 >= options_.recent_slope_fraction * expected;
    }
    const bool sustained = recent_fit.trend_z >= options_.recent_trend_z && recent_fit.slope > 0 &&
                           recent_fit.slope >= options_.recent_slope_fraction * fit.slope && climbs_throughout;
    if (!update && (fit.trend_z < options_.trend_z || !big(growth) || !big(measured) || !sustained)) continue;
    if (!update && !final && !ctx.online()) {
      candidate_at_.emplace(tag, Candidate{static_cast<int64_t>(xs.front()), static_cast<int64_t>(xs.back())});
      continue;
    }
    // Online, not in the run's first minute (when the wall time is known).
    if (!update && !final && !(last_wall_ - first_wall_ >= options_.online_min_seconds) && first_wall_ > 0) continue;
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
    auto candidate = candidate_at_.find(tag);
    f.step = candidate != candidate_at_.end() ? candidate->second.since : static_cast<int64_t>(xs.front());
    f.last_step = static_cast<int64_t>(xs.back());
    f.location = tag;
    const double current = ys.back(), grown = measured;
    f.summary = tag + " grows ~" + FormatNumber(fit.slope / 1e6, 3) + " MB/step since step " + std::to_string(f.step) + " (+" +
                FormatNumber(growth / 1e6, 3) + " MB; Theil-Sen slope, Mann-Kendall z " + FormatNumber(fit.trend_z, 3) +
                "): " + FormatNumber(current / 1e6, 4) + " MB at step " + std::to_string(f.last_step) + ", +" +
                FormatNumber(grown / 1e6, 4) + " MB since step " + std::to_string(f.step) +
                (growing.empty() ? "" : "; " + growing + " objects grow +" + FormatNumber(growing_slope, 3) + " per step");
    json ev = {{"slope_bytes_per_step", Num(fit.slope)}, {"intercept", Num(fit.intercept)}, {"trend_z", Num(fit.trend_z)},
               {"growth_bytes", Num(growth)}, {"since_step", f.step}, {"level_bytes", Num(level)},
               {"current_bytes", Num(current)}, {"current_step", f.last_step}, {"grown_bytes", Num(grown)},
               {"recent_slope_bytes_per_step", Num(recent_fit.slope)}, {"recent_trend_z", Num(recent_fit.trend_z)},
               {"recent_since_step", static_cast<int64_t>(xs[xs.size() - recent])}};
    if (own_rss_ > 0) ev["trainscope_rss_excluded_bytes"] = Num(own_rss_);
    if (auto c = candidate_at_.find(tag); c != candidate_at_.end()) ev["detected_at"] = c->second.seen;
    if (!growing.empty()) ev["growing_type"] = {{"type", growing}, {"per_step", Num(growing_slope)}, {"trend_z", Num(growing_z)}};
    f.evidence_json = ev.dump();
    std::vector<Cause> causes;
    const bool tensors = growing.find("Tensor") != std::string::npos || growing.find("tensor") != std::string::npos;
    RaiseCause(&causes, "retained_graph", tensors || cuda ? 0.7 : 0.4);
    if (!growing.empty() && !tensors) RaiseCause(&causes, "growing_python_objects", 0.6);
    f.causes = causes;
    if (update) ctx.Amend(std::move(f));
    else ctx.Report(std::move(f));
  }
}

// The recent steps' time per input element over the baseline's, when the elements per step
// varied (by work_varies); nullopt when they did not, or are not recorded.
std::optional<double> ThroughputDetector::TimePerElementRatio() const {
  if (!std::isfinite(elements_)) return std::nullopt;
  std::vector<double> base_per, now_per;
  double lo = kNaN, hi = kNaN;
  for (size_t k = 0; k < base_.size(); ++k) {
    const double e = base_elements_[k];
    if (!(e > 0)) continue;
    base_per.push_back(base_[k] / e);
    lo = std::isnan(lo) ? e : std::min(lo, e);
    hi = std::isnan(hi) ? e : std::max(hi, e);
  }
  for (size_t k = 0; k < recent_.size(); ++k) {
    const double e = recent_elements_[k];
    if (!(e > 0)) continue;
    now_per.push_back(recent_[k].second / e);
    lo = std::isnan(lo) ? e : std::min(lo, e);
    hi = std::isnan(hi) ? e : std::max(hi, e);
  }
  if (base_per.empty() || now_per.empty() || !(hi >= options_.work_varies * lo)) return std::nullopt;
  return Median(now_per) / Median(base_per);
}

void ThroughputDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  for (const char* tag : {tags::kMemCudaAllocated, tags::kMemRss, tags::kSysRss}) {
    if (const double* v = frame.Scalar(tag)) {
      memory_ = *v;
      break;
    }
  }
  if (const double* v = frame.Scalar(tags::kSysCpuPercent)) host_cpu_ = *v;
  if (const double* v = frame.Scalar(tags::kSysProcessCpuPercent)) {
    process_cpu_ = *v;
    if (std::isnan(first_process_cpu_)) first_process_cpu_ = *v;
  }
  if (const double* v = frame.Scalar(tags::kDataInputElements); v && *v > 0) elements_ = *v;
  double wait, step;
  if (!StepTimes(frame, &wait, &step) || !(step > 0)) return;
  const size_t i = seen_++;
  if (i < options_.skip) return;
  if (base_.size() < options_.baseline) {
    base_.push_back(step);
    base_elements_.push_back(elements_);
    base_wait_.push_back(wait);
    if (std::isfinite(memory_)) base_memory_.push_back(memory_);
    return;
  }
  recent_.emplace_back(frame.step, step);
  recent_wait_.push_back(wait);
  recent_elements_.push_back(elements_);
  if (recent_wait_.size() > options_.window) recent_wait_.pop_front();
  if (recent_.size() > options_.window) recent_.pop_front();
  if (recent_elements_.size() > options_.window) recent_elements_.pop_front();
  if (recent_.size() < options_.window) return;
  std::vector<double> r;
  for (const auto& p : recent_) r.push_back(p.second);
  const double base = Median(base_), now = Median(r);
  if (!(base > 0) || now < options_.ratio * base || now - base < options_.min_increase_seconds) return;
  // Per element of work, when the work per step varied: a longer step that did more is
  // not slower.
  const std::optional<double> work_ratio = TimePerElementRatio();
  if (work_ratio && !(*work_ratio >= options_.ratio)) return;
  Finding f;
  f.code = "THROUGHPUT_DROP";
  f.severity = now >= options_.warning_ratio * base && now - base >= options_.warning_increase_seconds
                   ? Severity::kWarning
                   : Severity::kInfo;
  f.step = recent_.front().first;
  f.last_step = frame.step;
  f.location = tags::kTimeStep;
  f.summary = "steps take " + FormatNumber(now / base, 3) + "x as long as early in the run (" + FormatNumber(1e3 * now, 3) + " ms against " +
              FormatNumber(1e3 * base, 3) + " ms)";
  json evidence = {{"step_ms", Num(1e3 * now)}, {"baseline_step_ms", Num(1e3 * base)}, {"ratio", Num(now / base)}};
  if (work_ratio && std::isfinite(*work_ratio)) {
    evidence["time_per_element_ratio"] = Num(*work_ratio);
    f.summary += "; " + FormatNumber(*work_ratio, 3) + "x as long per input element";
  }
  // Causes by the evidence the run has (options: memory_growth, data_share, busy_host_percent).
  double retained = 0.25, loader = 0.15, host = 0.35;
  if (!base_memory_.empty() && std::isfinite(memory_)) {
    const double base_memory = Median(base_memory_);
    const double grown = memory_ - base_memory;
    evidence["memory_growth_mb"] = Num(grown / 1e6);
    if (grown >= options_.memory_growth * base_memory && grown >= options_.memory_growth_bytes) {
      retained = 0.7;
    } else {
      retained = 0.05;  // a kept graph grows memory with every step: it has not grown
    }
  }
  std::vector<double> w(recent_wait_.begin(), recent_wait_.end());
  const double wait_increase = Median(w) - Median(base_wait_);
  if (std::isfinite(wait_increase)) {
    evidence["data_wait_increase_ms"] = Num(1e3 * wait_increase);
    loader = wait_increase >= options_.data_share * (now - base) ? 0.8 : 0.05;
  }
  if (std::isfinite(host_cpu_)) {
    evidence["host_cpu_percent"] = Num(host_cpu_);
    if (std::isfinite(process_cpu_)) {
      evidence["process_cpu_percent"] = Num(process_cpu_);
      evidence["process_cpu_percent_early"] = Num(first_process_cpu_);
    }
    const bool starved = !std::isfinite(process_cpu_) || !(first_process_cpu_ > 0) ||
                         process_cpu_ <= options_.starved_fraction * first_process_cpu_;
    if (host_cpu_ >= options_.busy_host_percent && starved) host = 0.75;
    else if (host_cpu_ < options_.busy_host_percent / 2) host = 0.1;
  }
  f.evidence_json = evidence.dump();
  f.causes = {{"host_contention", host}, {"retained_graph", retained}, {"slow_dataloader", loader}};
  ctx.Report(std::move(f));
}

}  // namespace trainscope::doctor
