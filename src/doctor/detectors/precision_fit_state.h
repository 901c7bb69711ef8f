// The precision fit's running state: what PrecisionFitDetector has seen of the run's declared
// precision, overflows, gradient underflow, lost updates, FP8 scaling and TF32 inputs, shared
// by the files that track it step by step and the ones that report it at the end.
#pragma once

#ifdef TRAINSCOPE_WITH_NUMERICS
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "doctor/detectors/numerics.h"
#include "numerics/fit.h"
#include "numerics/formats.h"

namespace trainscope::doctor {

inline const numerics::FloatFormat& BuiltinFormat(const char* name) { return *numerics::FormatTable::Builtin().Find(name); }

// A parameter's lost-update counts over the recorded steps.
struct PrecisionFitStale {
  size_t points = 0, est_points = 0;
  double observed_sum = 0, est_sum = 0, observed_max = 0;
  int64_t first_step = -1, last_step = 0, first_bad = -1;
  uint64_t numel = 0;
  double weight_abs_max = 0, update_abs_max = 0, update_rms = 0;
  // The gradient as first recorded (sum, sum of squares, min, max), and whether it ever
  // differed from that: one that never does was written by no backward in the run (a
  // frozen teacher's .grad left from its own training), so a weight that does not move
  // beside it has lost no update.
  double grad_sum = 0, grad_sum_squares = 0, grad_min = 0, grad_max = 0;
  bool grad_changes = false;
};

// A parameter whose updates are lost, with the share lost and how it was judged.
struct PrecisionFitLost {
  std::string param;
  double share;
  bool observed;
  const PrecisionFitStale* x;
};

struct PrecisionFitDetector::State {
  const numerics::FloatFormat* fp16 = &BuiltinFormat("fp16");
  const numerics::FloatFormat* bf16 = &BuiltinFormat("bf16");
  const numerics::FloatFormat* e4m3 = &BuiltinFormat("fp8-e4m3");
  const numerics::FloatFormat* e5m2 = &BuiltinFormat("fp8-e5m2");
  size_t meta_seen = static_cast<size_t>(-1);
  DeclaredPrecision declared;
  bool loss_scaling = false;
  double loss_scale = kNaN;
  bool cast_signature = false;
  std::string cast_why;
  int64_t nonfinite_step = -1;  // first step with a non-finite weight or gradient

  struct Over {
    std::string tag;
    int64_t step = 0;
    double abs_max = 0;
    bool has_histogram = false;
    numerics::FitCounts counts;
  };
  std::map<std::string, Over> overflow_pending;  // first point past the range, per tag
  std::set<std::string> overflow_reported;

  struct Under {
    numerics::MergedGradient merged;
    bool any = false;
    numerics::FitCounts at_used_scale;
    int64_t first_bad = -1, last_bad = -1, first = 0, last = 0;
  };
  std::map<std::string, Under> grads;
  std::vector<std::string> grad_order;
  double grad_abs_max = 0;
  std::string grad_abs_max_tag;
  int64_t grad_abs_max_step = 0;
  int used_scale_exponent_min = 1000, used_scale_exponent_max = -1000;

  using Stale = PrecisionFitStale;
  std::map<std::string, Stale> stale;
  std::vector<std::string> stale_order;

  struct Fp8 {
    std::deque<double> window;
    numerics::FitCounts counts;
    size_t points = 0, histogram_points = 0, overflow_points = 0;
    int64_t first = 0, last = 0, first_overflow = -1, worst_step = 0;
    int last_k = 0;
    double worst_lost = 0;
    const numerics::FloatFormat* format = nullptr;
  };
  std::map<std::string, Fp8> fp8;

  struct Tf32 {
    double bits = 0, mean = 0, std = 0;
    int64_t step = 0;
    std::string input;
  };
  std::map<std::string, Tf32> tf32;

  bool Fp16Active() const { return declared.fp16 || loss_scaling || cast_signature; }
  std::string Fp16Why() const {
    if (declared.fp16) return declared.fp16_why;
    if (loss_scaling) return "a loss-scale series is logged (float16 with loss scaling)";
    return cast_why;
  }

  // OnStep's steps (precision_fit.cc; the update counts in precision_fit_updates.cc).
  void ReadRunSettings(const RunFacts& facts, const StepFrame& frame);
  void FindCastSignature(const StepFrame& frame);
  void FindFirstNonfinite(const StepFrame& frame, bool skipped);
  void TrackOverflow(const std::string& tag, const TensorStats& s, int64_t step);
  void TrackGradient(const std::string& tag, const TensorStats& s, int64_t step, int used_k,
                     const PrecisionFitOptions& options);
  void TrackUpdate(const std::string& tag, const TensorStats& s, const StepFrame& frame, bool skipped, double lr,
                   const PrecisionFitOptions& options);
  void TrackFp8(const std::string& tag, const TensorStats& s, bool grad, int64_t step,
                const PrecisionFitOptions& options);
  void TrackTf32(const RunFacts& facts, const StepFrame& frame);
  void ReportOverflows(const DetectorContext& ctx);
  Finding OverflowFinding(const Over& o) const;
};

}  // namespace trainscope::doctor
#endif  // TRAINSCOPE_WITH_NUMERICS
