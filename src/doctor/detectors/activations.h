// Detectors on activation statistics (`act/<module>`) and the input batch: dead units
// (ReLU family), saturated units (sigmoid/tanh), drift of a layer's distribution against
// its own early baseline, and inputs far from unit scale.
#pragma once

#include <deque>
#include <limits>

#include "doctor/detector.h"

namespace trainscope::doctor {

// A run of consecutive records of one module above a threshold, measured in steps: each
// record covers the steps since the module's previous record (the first record only its
// own step), so a check sustained for N steps means N steps whether activations are
// recorded every step or every 20.
struct StepStreak {
  int64_t previous_record = std::numeric_limits<int64_t>::min();  // the module's last record
  int64_t covered_from = 0;  // first step the streak covers
  size_t records = 0;        // records in the streak (0: no streak)
  // Adds a record at `step`; `bad`: above the threshold. Returns the steps covered.
  int64_t Add(int64_t step, bool bad) {
    const int64_t from = previous_record == std::numeric_limits<int64_t>::min() ? step : previous_record + 1;
    previous_record = step;
    if (!bad) {
      records = 0;
      return 0;
    }
    if (records++ == 0) covered_from = from;
    return step - covered_from + 1;
  }
};

struct DeadUnitsOptions {
  // Fraction of units that are zero for every sample of the batch, for 20 steps in a row.
  // Healthy ReLU layers sit well under 0.2 at batch >= 8; even batch 1 gives ~0.5 (a unit
  // is off for half the inputs), so 0.7 is past both.
  double threshold = 0.7;
  // Sustained for `sustain` steps, measured in steps: a record covers the steps since the
  // previous record of the same module (activations are recorded every few steps), and at
  // least min_records records in a row, so that one batch does not decide.
  size_t sustain = 20;
  size_t min_records = 2;
  // A functional activation (F.relu in forward) is no module: its output has no
  // dead_fraction. A unit that is zero for every sample passes no gradient back, so its
  // weight row's gradient is exactly 0: the per-unit gradient norms (grad_units/, every
  // units_every steps) show it whatever the activation is written as. Judged when the run
  // records no dead_fraction (no ReLU modules), at >= threshold of a weight matrix's rows
  // (>= min_units of them) exactly 0 for units_sustain records in a row.
  size_t units_sustain = 3;
  size_t min_units = 8;
};

class DeadUnitsDetector : public Detector {
 public:
  explicit DeadUnitsDetector(DeadUnitsOptions options = {}) : options_(options) {}
  const char* name() const override { return "dead_units"; }
  DetectorSpec spec() const override {
    return {{"DEAD_UNITS"}, {{Input::kActivations}, {Input::kDeadSaturated}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  DeadUnitsOptions options_;
  std::unordered_map<std::string, StepStreak> streak_;
  std::unordered_map<std::string, double> first_;
  std::unordered_map<std::string, std::pair<size_t, int64_t>> unit_streak_;  // grad_units/ records
  std::unordered_map<std::string, double> unit_first_;
};

struct SaturationOptions {
  // Fraction of values in the flat tails (|tanh| > 0.99, sigmoid < 0.01 or > 0.99) for 20
  // steps in a row. There the derivative is < 0.02: those units pass almost no gradient.
  double threshold = 0.6;
  size_t sustain = 20;     // steps (each record covers the steps since the module's previous one)
  size_t min_records = 2;  // and records in a row
};

class SaturationDetector : public Detector {
 public:
  explicit SaturationDetector(SaturationOptions options = {}) : options_(options) {}
  const char* name() const override { return "saturation"; }
  DetectorSpec spec() const override {
    return {{"ACTIVATION_SATURATION"}, {{Input::kActivations}, {Input::kDeadSaturated}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  SaturationOptions options_;
  std::unordered_map<std::string, StepStreak> streak_;
};

struct ActivationDriftOptions {
  // Baseline: median std and mean of the layer's output over steps [skip, skip + window)
  // of its own series; now: the same over the last `window` records. Drift when the std
  // changed by >= ratio (either way) or the mean moved by >= mean_shift baseline stds.
  // Training legitimately rescales activations a few times; an order of magnitude is info,
  // two orders (warning_ratio) a warning.
  size_t skip = 5;
  size_t window = 20;
  double ratio = 10;
  double warning_ratio = 100;
  double mean_shift = 10;
};

class ActivationDriftDetector : public Detector {
 public:
  explicit ActivationDriftDetector(ActivationDriftOptions options = {}) : options_(options) {}
  const char* name() const override { return "activation_drift"; }
  DetectorSpec spec() const override {
    return {{"ACTIVATION_DRIFT"}, {{Input::kActivations}, {Input::kStationaryData}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  struct Layer {
    size_t count = 0;
    std::vector<double> base_std, base_mean;
    std::deque<double> std, mean;
    Severity reported = Severity::kInfo;
    bool any = false;
  };
  ActivationDriftOptions options_;
  std::unordered_map<std::string, Layer> layers_;
};

struct InputScaleOptions {
  // A floating input whose values are far from unit scale: RMS >= 20 over the first
  // `points` batches (pixels in 0..255 have RMS ~100-150; standardised data ~1).
  double rms = 20;
  size_t points = 10;
};

class InputScaleDetector : public Detector {
 public:
  explicit InputScaleDetector(InputScaleOptions options = {}) : options_(options) {}
  const char* name() const override { return "input_scale"; }
  DetectorSpec spec() const override {
    return {{"UNNORMALIZED_INPUT"}, {}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  InputScaleOptions options_;
  std::unordered_map<std::string, std::vector<double>> rms_;
};

struct BatchNormBatchOptions {
  // BatchNorm trained on batches of at most 4 (config batch_size): its per-batch mean and
  // variance are noise (with 2 samples every normalised value is +-1) and the running
  // statistics used at evaluation do not match what training saw. PyTorch refuses batch 1.
  int max_batch = 4;
};

// A BatchNorm layer (meta type, else a bn*/batchnorm name) with tiny batches: reported as
// ARCHITECTURE_WARNING with the layer named, once, at the first step.
class BatchNormBatchDetector : public Detector {
 public:
  explicit BatchNormBatchDetector(BatchNormBatchOptions options = {}) : options_(options) {}
  const char* name() const override { return "batchnorm_batch"; }
  DetectorSpec spec() const override {
    return {{"ARCHITECTURE_WARNING"}, {}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  BatchNormBatchOptions options_;
  bool done_ = false;
};

}  // namespace trainscope::doctor
