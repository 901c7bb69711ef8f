#include "perf/perf_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "core/tag.h"
#include "perf/cpu_peak.h"
#include "perf/peak_table.h"

namespace trainscope::perf {

namespace {

double Median(std::vector<double> values) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }), values.end());
  if (values.empty()) return kNaN;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + mid);
  return (lower + upper) / 2;
}

// step -> value of a scalar series (the last point of a step that repeats).
std::map<int64_t, double> ByStep(const RunData& data, std::string_view tag) {
  std::map<int64_t, double> out;
  if (const ScalarSeries* series = data.FindScalar(tag)) {
    for (size_t i = 0; i < series->steps.size(); ++i) out[series->steps[i]] = series->values[i];
  }
  return out;
}

double At(const std::map<int64_t, double>& series, int64_t step, double fallback) {
  const auto found = series.find(step);
  return found == series.end() ? fallback : found->second;
}

std::string Meta(const RunData& data, const std::string& key) {
  const auto found = data.meta.find(key);
  return found == data.meta.end() ? "" : found->second;
}

double ConfigBatchSize(const RunData& data) {
  const std::string config = Meta(data, "config");
  if (config.empty()) return kNaN;
  const auto parsed = nlohmann::json::parse(config, nullptr, false);
  if (!parsed.is_object()) return kNaN;
  for (const char* key : {"batch_size", "per_device_train_batch_size", "train_batch_size"}) {
    if (parsed.contains(key) && parsed[key].is_number()) return parsed[key].get<double>();
  }
  return kNaN;
}

std::string Percent(double fraction) { return fmt::format("{:.1f} %", 100 * fraction); }

}  // namespace

double MetaNumber(const RunData& data, const std::string& key) {
  const std::string text = Meta(data, key);
  if (text.empty()) return kNaN;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  return end == text.c_str() ? kNaN : value;
}

double BusBandwidthFactor(std::string_view collective, int ranks) {
  if (ranks < 1) return kNaN;
  const double n = ranks;
  if (collective == "all_reduce") return 2 * (n - 1) / n;
  if (collective == "all_gather" || collective == "reduce_scatter" || collective == "all_to_all") return (n - 1) / n;
  if (collective == "broadcast" || collective == "reduce") return 1;
  return kNaN;
}

double ScalingEfficiency(double throughput_1, double throughput_n, int n) {
  if (!(throughput_1 > 0) || !(throughput_n > 0) || n < 1) return kNaN;
  return throughput_n / (n * throughput_1);
}

namespace {

struct RankSeries {
  std::map<int64_t, double> step, flops, samples, tokens;
  double flops_meta, samples_meta, tokens_meta;
};

// Each rank's step time and work series, and its RankPerf in out->ranks; how many ranks
// have each step.
std::vector<RankSeries> ReadRanks(const std::vector<const RunData*>& ranks, RunPerf* out,
                                  std::map<int64_t, int>* ranks_at_step) {
  std::vector<RankSeries> series;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RunData& data = *ranks[r];
    RankSeries s{ByStep(data, tags::kTimeStep), ByStep(data, tags::kPerfFlops), ByStep(data, tags::kPerfSamples),
                 ByStep(data, tags::kPerfTokens), MetaNumber(data, tags::kPerfFlopsPerStep),
                 MetaNumber(data, tags::kPerfSamplesPerStep), MetaNumber(data, tags::kPerfTokensPerStep)};
    if (!std::isfinite(s.samples_meta)) s.samples_meta = ConfigBatchSize(data);
    RankPerf rank;
    rank.rank = static_cast<int>(MetaNumber(data, "rank"));
    if (rank.rank < 0 || !std::isfinite(MetaNumber(data, "rank"))) rank.rank = static_cast<int>(r);
    std::vector<double> seconds;
    for (auto it = s.step.begin(); it != s.step.end(); ++it) {
      if (it != s.step.begin() || s.step.size() < 3) seconds.push_back(it->second);
      ++(*ranks_at_step)[it->first];
    }
    rank.median_step_seconds = Median(seconds);
    rank.steps = static_cast<int>(s.step.size());
    out->ranks.push_back(rank);
    series.push_back(std::move(s));
  }
  return series;
}

// Per step, over the ranks that all have it, the slowest rank setting the step's time: the
// rates and MFU of each step, and their medians over the steps after the first.
void AddStepRates(const std::vector<RankSeries>& series, const std::map<int64_t, int>& ranks_at_step,
                  const PeakChoice& peak, RunPerf* out) {
  const int64_t first_step = ranks_at_step.empty() ? 0 : ranks_at_step.begin()->first;
  std::vector<double> step_seconds, samples_rate, tokens_rate, flops_rate, mfus;
  for (const auto& [step, count] : ranks_at_step) {
    if (count != out->world_size) continue;
    StepPerf sp;
    sp.step = step;
    double slowest = 0, samples = 0, tokens = 0, flops = 0;
    for (const auto& s : series) {
      slowest = std::max(slowest, s.step.at(step));
      samples += At(s.samples, step, s.samples_meta);
      tokens += At(s.tokens, step, s.tokens_meta);
      flops += At(s.flops, step, s.flops_meta);
    }
    if (!(slowest > 0)) continue;
    sp.seconds = slowest;
    sp.samples_per_second = samples / slowest;
    sp.tokens_per_second = tokens / slowest;
    sp.flops_per_second = flops / out->world_size / slowest;
    if (peak.flops && *peak.flops > 0) sp.mfu = sp.flops_per_second / *peak.flops;
    out->steps.push_back(sp);
    if (step != first_step || ranks_at_step.size() < 3) {
      step_seconds.push_back(sp.seconds);
      samples_rate.push_back(sp.samples_per_second);
      tokens_rate.push_back(sp.tokens_per_second);
      flops_rate.push_back(sp.flops_per_second);
      mfus.push_back(sp.mfu);
    }
  }
  out->step_seconds = Median(step_seconds);
  out->samples_per_second = Median(samples_rate);
  out->tokens_per_second = Median(tokens_rate);
  out->flops_per_second = Median(flops_rate);
  out->mfu = Median(mfus);
}

// Each phase's mean share of the step over all ranks, the steps after the first; "idle" is
// what no phase covers when the run has no time/other.
void AddPhaseShares(const std::vector<const RunData*>& ranks, const std::vector<RankSeries>& series,
                    int64_t first_step, RunPerf* out) {
  static const char* kPhases[] = {"data", "forward", "backward", "optimizer", "other"};
  std::map<std::string, std::pair<double, int>> sums;
  bool has_other = false, has_phase = false;
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (const char* phase : kPhases) {
      const auto values = ByStep(*ranks[r], tags::kTime.Of(phase));
      if (values.empty()) continue;
      has_phase = true;
      if (std::string_view(phase) == "other") has_other = true;
      for (const auto& [step, seconds] : series[r].step) {
        if (step == first_step && series[r].step.size() >= 3) continue;
        if (!(seconds > 0)) continue;
        auto& [sum, n] = sums[phase];
        sum += At(values, step, 0) / seconds;
        ++n;
      }
    }
  }
  double covered = 0;
  for (const char* phase : kPhases) {
    const auto found = sums.find(phase);
    if (found == sums.end() || found->second.second == 0) continue;
    const double share = found->second.first / found->second.second;
    covered += share;
    out->shares.push_back({phase, share});
  }
  if (has_phase && !has_other) out->shares.push_back({"idle", std::max(0.0, 1 - covered)});
}

// LOW_MFU, with the reasons ranked by the share of the step each takes from the compute.
Finding LowMfuFinding(const RunPerf& out, const PeakChoice& peak, const PerfOptions& options) {
  Finding f;
  f.code = "LOW_MFU";
  f.severity = Severity::kInfo;
  f.step = out.steps.empty() ? 0 : out.steps.front().step;
  f.last_step = out.steps.empty() ? 0 : out.steps.back().step;
  f.location = tags::kTimeStep;
  struct Reason {
    std::string id, text;
    double share;
  };
  std::vector<Reason> reasons;
  double compute_share = 0;
  for (const auto& s : out.shares) {
    if (s.phase == "forward" || s.phase == "backward") compute_share += s.share;
    if (s.phase == "data") {
      reasons.push_back({"slow_dataloader", fmt::format("waiting for data: {} of the step", Percent(s.share)), s.share});
    } else if (s.phase == "other") {
      reasons.push_back({"host_overhead", fmt::format("host work outside forward/backward/optimizer (logging, "
                                                      "Python, many small ops): {} of the step", Percent(s.share)),
                         s.share});
    } else if (s.phase == "idle") {
      reasons.push_back({"device_idle", fmt::format("time no recorded phase covers (the device idle): {} of the step",
                                                    Percent(s.share)), s.share});
    } else if (s.phase == "optimizer") {
      reasons.push_back({"optimizer_time", fmt::format("the optimizer step (no model FLOPs): {} of the step",
                                                       Percent(s.share)), s.share});
    }
  }
  if (compute_share > 0) {
    // What forward and backward themselves reach: the MFU they would have with nothing else
    // in the step. Low: small or oddly shaped matrices, memory-bound ops (PERF_HOTSPOT).
    const double in_compute = out.mfu / compute_share;
    reasons.push_back({"slow_kernels",
                       fmt::format("forward and backward themselves run at {} of the peak ({} of the step): small "
                                   "or oddly shaped matrix products, memory-bound elementwise ops, a peak for a "
                                   "precision the run does not use",
                                   Percent(in_compute), Percent(compute_share)),
                       compute_share * (1 - std::min(1.0, in_compute))});
  }
  std::sort(reasons.begin(), reasons.end(), [](const Reason& a, const Reason& b) { return a.share > b.share; });
  nlohmann::json evidence = {{"mfu", out.mfu},
                             {"achieved_flops_per_second", out.flops_per_second},
                             {"peak_flops", *peak.flops},
                             {"peak_source", peak.source},
                             {"flops_per_step", out.flops_per_step},
                             {"step_seconds", out.step_seconds},
                             {"threshold", options.low_mfu}};
  nlohmann::json listed = nlohmann::json::array();
  for (const auto& r : reasons) listed.push_back({{"id", r.id}, {"share", r.share}, {"text", r.text}});
  evidence["reasons"] = listed;
  f.evidence_json = evidence.dump();
  std::string named;
  for (size_t i = 0; i < reasons.size() && i < 2; ++i) named += (i ? "; " : "") + reasons[i].text;
  f.summary = fmt::format("MFU {} of the {} peak ({:.3g} of {:.3g} FLOP/s per device){}{}", Percent(out.mfu),
                          out.precision.empty() ? "device's" : out.precision, out.flops_per_second, *peak.flops,
                          named.empty() ? "" : ". Biggest reasons: ", named);
  for (const auto& r : reasons) {
    f.causes.push_back({r.id, std::clamp(r.share, 0.0, 1.0)});
  }
  for (const auto& r : reasons) {
    if (r.id == "slow_dataloader") f.actions.push_back("Feed the step faster: DataLoader num_workers, pin_memory, prefetch, preprocessing offline");
    if (r.id == "host_overhead") f.actions.push_back("Cut host work per step: log less often, fuse small ops (torch.compile), larger batches");
    if (r.id == "device_idle") f.actions.push_back("Find what the device waits for: trainscope trace on a profiler trace of a few steps");
    if (r.id == "optimizer_time") f.actions.push_back("Use a fused or foreach optimizer (fused=True / foreach=True)");
    if (r.id == "slow_kernels") f.actions.push_back("Rank the layers by FLOP/s (ts.count_flops per module, PERF_HOTSPOT); pad matrix dims to multiples of 8/64, use bf16 on tensor cores");
  }
  return f;
}

}  // namespace

RunPerf AnalyzeRun(const std::vector<const RunData*>& ranks, const PeakChoice& peak, const PerfOptions& options) {
  RunPerf out;
  out.peak = peak;
  out.world_size = static_cast<int>(ranks.size());
  if (ranks.empty()) return out;
  const RunData& first = *ranks[0];
  out.flops_per_step = MetaNumber(first, tags::kPerfFlopsPerStep);
  out.samples_per_step = MetaNumber(first, tags::kPerfSamplesPerStep);
  if (!std::isfinite(out.samples_per_step)) out.samples_per_step = ConfigBatchSize(first);
  out.tokens_per_step = MetaNumber(first, tags::kPerfTokensPerStep);
  out.precision = Meta(first, tags::kPerfPrecision);
  out.device = Meta(first, tags::kPerfDevice);
  std::map<int64_t, int> ranks_at_step;
  const std::vector<RankSeries> series = ReadRanks(ranks, &out, &ranks_at_step);
  const int64_t first_step = ranks_at_step.empty() ? 0 : ranks_at_step.begin()->first;
  AddStepRates(series, ranks_at_step, peak, &out);
  AddPhaseShares(ranks, series, first_step, &out);
  if (std::isfinite(out.mfu) && out.mfu < options.low_mfu) out.findings.push_back(LowMfuFinding(out, peak, options));
  return out;
}

ScalingPerf CompareScaling(const RunPerf& run_1, const RunPerf& run_n, const PerfOptions& options) {
  ScalingPerf out;
  out.n_1 = std::max(1, run_1.world_size);
  out.n_n = std::max(1, run_n.world_size);
  const bool samples = std::isfinite(run_1.samples_per_second) && std::isfinite(run_n.samples_per_second);
  out.unit = samples ? "samples/s" : "tokens/s";
  out.throughput_1 = samples ? run_1.samples_per_second : run_1.tokens_per_second;
  out.throughput_n = samples ? run_n.samples_per_second : run_n.tokens_per_second;
  const double ratio = static_cast<double>(out.n_n) / out.n_1;
  if (out.throughput_1 > 0 && out.throughput_n > 0 && ratio > 0) out.efficiency = out.throughput_n / (ratio * out.throughput_1);
  if (std::isfinite(out.efficiency) && out.n_n != out.n_1 && out.efficiency < options.poor_scaling) {
    Finding f;
    f.code = "POOR_SCALING";
    f.severity = Severity::kWarning;
    f.location = tags::kTimeStep;
    double slowest = kNaN, fastest = kNaN;
    for (const auto& r : run_n.ranks) {
      if (!std::isfinite(r.median_step_seconds)) continue;
      slowest = std::isfinite(slowest) ? std::max(slowest, r.median_step_seconds) : r.median_step_seconds;
      fastest = std::isfinite(fastest) ? std::min(fastest, r.median_step_seconds) : r.median_step_seconds;
    }
    const double step_growth = run_n.step_seconds / run_1.step_seconds;
    f.summary = fmt::format("{} devices give {:.3g} {} against {:.3g} on {}: scaling efficiency {} (under {}); "
                            "the step takes {:.2f}x as long{}",
                            out.n_n, out.throughput_n, out.unit, out.throughput_1, out.n_1, Percent(out.efficiency),
                            Percent(options.poor_scaling), step_growth,
                            std::isfinite(slowest) && slowest > 1.2 * fastest
                                ? fmt::format(", and the slowest rank's step is {:.2f}x the fastest's", slowest / fastest)
                                : "");
    f.evidence_json = nlohmann::json{{"efficiency", out.efficiency}, {"throughput_1", out.throughput_1},
                                     {"throughput_n", out.throughput_n}, {"n_1", out.n_1}, {"n_n", out.n_n},
                                     {"unit", out.unit}, {"step_seconds_1", run_1.step_seconds},
                                     {"step_seconds_n", run_n.step_seconds}, {"threshold", options.poor_scaling}}
                          .dump();
    f.actions = {"Compare the ranks' step times (trainscope diagnose RUN_DIR names a STRAGGLER)",
                 "Measure the all-reduce (trainscope perf collectives) against the step's compute; "
                 "overlap it (DDP bucket_cap_mb, gradient accumulation with no_sync)"};
    out.findings.push_back(std::move(f));
  }
  return out;
}

namespace {

std::string MetaText(const RunData& data, const char* key) {
  const auto found = data.meta.find(key);
  return found == data.meta.end() ? "" : found->second;
}

}  // namespace

// The peak a run's MFU is taken against: a recorded one, the table's row for its device and
// precision, this machine's computed CPU peak when it was recorded here; else none (no MFU).
PeakChoice ChoosePeak(const RunData& data, std::string_view this_host) {
  PeakChoice choice;
  const double recorded = MetaNumber(data, tags::kPerfPeakFlops);
  const std::string device = MetaText(data, tags::kPerfDevice);
  const std::string precision = NormalizePrecision(MetaText(data, tags::kPerfPrecision));
  if (recorded > 0) {
    choice.flops = recorded;
    choice.source = "perf/peak_flops recorded with the run";
    return choice;
  }
  if (device.empty()) {
    choice.source = "no perf/device recorded (ts.perf.record): no MFU";
    return choice;
  }
  if (device == "cpu") {
    const std::string host = MetaText(data, "host");
    if (!host.empty() && host != this_host) {
      choice.source = fmt::format("recorded on host '{}', not this one: its CPU peak is not known here (record "
                                  "perf/peak_flops): no MFU", host);
      return choice;
    }
    if (precision != "fp32" && precision != "fp64") {
      choice.source = fmt::format("no computed CPU peak for {}: no MFU", precision.empty() ? "this precision" : precision);
      return choice;
    }
    const double threads = MetaNumber(data, tags::kPerfThreads);
    const CpuPeak cpu = ThisMachineCpuPeak(std::isfinite(threads) ? static_cast<int>(threads) : 0);
    if (!cpu.known) {
      choice.source = "CPU peak unknown (" + cpu.reason + "): no MFU";
      return choice;
    }
    choice.flops = precision == "fp64" ? cpu.fp64_flops : cpu.fp32_flops;
    choice.source = "computed CPU peak: " + cpu.basis;
    // The computed peak counts a base or nominal clock (a VM states one), and a busy core
    // boosts above it: a float32 GEMM measured faster than it (torch 2's reached 1.19x on an
    // Intel VM stating 2.1 GHz) shows the real ceiling, and an MFU against the computed one
    // would be overstated by as much.
    const double measured = MetaNumber(data, tags::kPerfMeasuredPeakFlops);
    if (precision == "fp32" && measured > *choice.flops) {
      choice.source = fmt::format("measured GEMM peak, {:.3g} FLOP/s: {:.2f}x the computed CPU peak ({}), so these "
                                  "cores run above the clock it counts", measured, measured / *choice.flops, cpu.basis);
      choice.flops = measured;
    }
    return choice;
  }
  const DevicePeak* row = PeakTable::Builtin().Find(device);
  if (row == nullptr) {
    choice.source = fmt::format("device '{}' is not in the peak table: no MFU", device);
    return choice;
  }
  choice.flops = row->PeakFlops(precision);
  if (!choice.flops) {
    choice.source = fmt::format("{} has no dense {} figure in the table: no MFU", row->name,
                                precision.empty() ? "precision" : precision);
    return choice;
  }
  choice.source = fmt::format("{} {} dense: {}", row->name, precision, row->source);
  return choice;
}

}  // namespace trainscope::perf
