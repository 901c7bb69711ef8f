// What a detector needs from a run, and what the doctor says when a run lacks it.
//
// Each detector declares the codes it emits and, per input below, the codes it cannot judge
// without that input (Detector::spec()). `Doctor::not_checked()` is derived from the two: for
// every input the run lacks (in this table's order), one entry naming the check, the codes of
// every registered detector that need it, and why. A new detector declares its needs; it
// writes no not_checked text. A new kind of input is one row in inputs.cc.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace trainscope::doctor {

struct RunFacts;

enum class Input {
  kLoss,            // the training loss (role loss)
  kProgressLoss,    // a loss that measures progress: not a reinforcement-learning run's
  kValLoss,         // a validation loss (role val_loss)
  kMetric,          // an accuracy or other metric (val_acc, acc)
  kMacroF1,         // macro-F1 beside accuracy
  kGradStats,       // per-parameter gradient statistics (grad/)
  kGradNorm,        // a gradient norm: per-parameter statistics or a global norm series
  kWeightUpdates,   // weight and update statistics (weight/, update/)
  kActivations,     // activation statistics (act/)
  kStationaryData,  // data whose distribution does not follow the model: not a reinforcement-learning run's states
  kDeadSaturated,   // dead/saturated fractions in the activation statistics (given activations)
  kInputBatch,      // statistics of the input batch or its labels (input/)
  kGradZeroed,      // train/grad_zeroed
  kLr,              // a learning-rate series
  kStepTime,        // step and data-wait timings
  kLossScaling,     // a loss-scale or overflow-skip series (float16)
  kMemory,          // memory series
};

// A detector's need: without `input` it cannot judge `codes` (empty: all of its codes).
// `listed_last`: in the not_checked entry these codes follow the other detectors' (the
// order the entry had before it was derived; the JSON keeps it).
struct Need {
  Input input;
  std::vector<std::string> codes = {};
  bool listed_last = false;
};

// What a detector emits and needs.
struct DetectorSpec {
  std::vector<std::string> codes;
  std::vector<Need> needs;
};

// What an input row looks at: the run facts and the scalar series seen.
struct InputView {
  const RunFacts& facts;
  const std::set<std::string, std::less<>>& scalars;
};

// One row per input: the check a not_checked entry names, whether the run lacks it, and why.
struct InputInfo {
  Input input;
  const char* check;
  bool (*missing)(const InputView& view);
  std::string (*reason)(const InputView& view);
};

// Every input, in the order not_checked lists them.
const std::vector<InputInfo>& Inputs();

}  // namespace trainscope::doctor
