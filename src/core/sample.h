// The one sample model of trainscope (DESIGN.md "One sample model"): every part that
// records, stores, imports, diagnoses or shows training speaks in these four types.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/measured_stats.h"

namespace trainscope {

// A number at a step: train/loss, opt/lr, mem/rss, ...
struct Scalar {
  std::string tag;
  int64_t step = 0;
  double wall_time = 0;  // seconds since the Unix epoch
  double value = 0;      // NaN and Inf are stored as they are: they are evidence
};

// Every statistic of one tensor at one step but its exponent histogram (TensorStats): the
// part a point costs to copy and keep where its histogram is absent or not wanted (96 bytes
// of 1.1 KB). Mean and std are over the finite values. The measured statistics
// (MeasuredTensorStats: dead_fraction, saturated_fraction ...) are the rows of
// data/tensor_stats.json, NaN when not measured.
struct TensorStatsSummary : MeasuredTensorStats {
  uint64_t numel = 0;
  uint64_t nan = 0;
  uint64_t inf = 0;
  uint64_t zeros = 0;
  double min = std::numeric_limits<double>::infinity();   // over finite values
  double max = -std::numeric_limits<double>::infinity();  // over finite values
  double sum = 0;
  double sum_squares = 0;
  double abs_max = 0;
  bool has_histogram = false;

  uint64_t finite() const { return numel - nan - inf; }
  double l2_norm() const { return std::sqrt(sum_squares); }
  double mean() const {
    return finite() ? sum / static_cast<double>(finite()) : std::numeric_limits<double>::quiet_NaN();
  }
  // Root mean square of the finite values.
  double rms() const {
    return finite() ? std::sqrt(sum_squares / static_cast<double>(finite())) : std::numeric_limits<double>::quiet_NaN();
  }
  // Population standard deviation of the finite values.
  double stddev() const;
};

// Fixed-size summary of one tensor at one step. The same shape serves gradients, weights,
// updates and activations.
struct TensorStats : TensorStatsSummary {
  // Exponent histogram: bin i counts finite non-zero values with |x| in
  // [2^(i + kMinExponent), 2^(i + kMinExponent + 1)). Values below 2^kMinExponent land in
  // bin 0 and values at or above 2^kMaxExponent in the last bin; zeros and non-finite
  // values have their own counts (zeros, nan, inf).
  static constexpr int kMinExponent = -64;
  static constexpr int kMaxExponent = 64;
  static constexpr int kExponentBins = kMaxExponent - kMinExponent;  // 128
  using Histogram = std::array<uint64_t, kExponentBins>;

  Histogram exponent_counts{};

  // Exponent of the bin a finite non-zero |x| falls in (clamped to the histogram's range).
  static int ExponentBin(double abs_value);
};

// Computes every statistic (and the exponent histogram when asked) in one pass over the
// values, reading them where they are.
TensorStats ComputeTensorStats(const float* values, size_t n, bool histogram);
TensorStats ComputeTensorStats(const double* values, size_t n, bool histogram);
// Half-precision inputs (IEEE binary16 and bfloat16) as raw 16-bit patterns.
TensorStats ComputeTensorStatsHalf(const uint16_t* values, size_t n, bool histogram);
TensorStats ComputeTensorStatsBFloat16(const uint16_t* values, size_t n, bool histogram);
// TensorStats from reductions done on an accelerator and copied to the host in one small
// tensor: counts of NaN, Inf and zeros; min and max over the finite values; sum and sum of
// squares of the finite values. abs_max follows from min and max.
TensorStats TensorStatsFromReductions(uint64_t numel, double nan, double inf, double zeros, double min, double max,
                                      double sum, double sum_squares);
// Folds b into a (e.g. statistics of a tensor computed in parts).
void MergeTensorStats(TensorStats& a, const TensorStats& b);

// A timed phase of a step: data, forward, backward, optimizer, comm.
struct Span {
  int64_t step = 0;
  std::string phase;
  double start = 0;     // seconds since the Unix epoch
  double duration = 0;  // seconds
};

enum class Severity { kInfo = 0, kWarning = 1, kCritical = 2 };
const char* SeverityName(Severity severity);
// Parses "info" | "warning" | "critical"; returns false on anything else.
bool ParseSeverity(const std::string& name, Severity* severity);

struct Cause {
  std::string id;  // DESIGN.md cause ids: lr_too_high, log_of_zero, ...
  double confidence = 0;
};

// What the doctor says: a named problem, where and when, the evidence, ranked causes and
// what to do.
struct Finding {
  std::string code;  // DESIGN.md finding codes: NONFINITE_GRAD, LOSS_SPIKE, ...
  Severity severity = Severity::kWarning;
  int64_t step = 0;
  int64_t last_step = 0;
  std::string location;       // parameter/module name, tag, "input", "loss" or ""
  std::string summary;
  std::string evidence_json = "{}";  // a JSON object
  std::vector<Cause> causes;         // most likely first
  std::vector<std::string> actions;
};

}  // namespace trainscope
