// The detector interface and what every detector may read: the run's facts (meta, roles,
// orders, this step's derived numbers) and the flight recorder. A detector is one small
// unit: a name, its thresholds (an Options struct with defaults and the reasons for them,
// docs/doctor.md) and one question it answers. It sees every step, in step order.
#pragma once

#include <cmath>
#include <cstdio>
#include <limits>
#include <algorithm>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/json_number.h"
#include "core/sample.h"
#include "core/streaming.h"
#include "doctor/flight_recorder.h"
#include "doctor/inputs.h"
#include "doctor/roles.h"
#include "doctor/step_frame.h"

namespace trainscope::doctor {

// A number as a finding's summary shows it: `digits` significant digits, as %g writes them.
inline std::string FormatNumber(double value, int digits) {
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.*g", digits, value);
  return buffer;
}

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Whether a check that reads a whole series (O(n)) is due at the series' n-th point: every
// `every` points while the series is short, and on a long one at a stride that doubles
// whenever n passes 400 strides' worth, so checking a run of n points costs O(n log n), not
// O(n^2 / every): a million-step run took minutes in the plateau and memory checks alone.
// A finding then comes at most about n/200 points after the point that made it true.
inline bool CheckDue(size_t n, size_t every) {
  size_t stride = every;
  while (n >= 400 * stride) stride *= 2;
  return n % stride == 0;
}

// Evidence numbers: NaN/Inf become "nan"/"inf"/"-inf" (core/json_number.h owns the rule).
inline nlohmann::json Num(double v) { return JsonNumber(v); }

// Facts about the run that every detector may read. The doctor keeps them current: meta
// as it arrives, orders as series first appear, the derived numbers once per step before
// the detectors run.
struct RunFacts {
  std::map<std::string, std::string> meta;
  RoleResolver roles;
  int num_classes = 0;          // from meta/config num_classes (0: unknown)
  int accumulation_steps = 1;   // declared gradient accumulation (meta/config)
  int batch_size = 0;           // meta/config batch_size (0: unknown)
  std::string optimizer;        // meta/config "optimizer" lower-cased ("" unknown)
  std::vector<std::string> module_order;  // forward order: meta `module_order`, else first-seen act/
  bool module_order_explicit = false;
  std::unordered_map<std::string, std::string> module_types;  // meta `module_types`
  std::unordered_map<std::string, std::vector<int64_t>> param_shapes;  // meta `param_shapes`
  std::vector<std::string> param_order;  // meta `param_order`, else first-seen weight/, grad/
  bool param_order_explicit = false;
  // The models a run watches (meta `models`: [{"name", "class", "optimizer", "params",
  // "tensors"}]). The first one without a name keeps bare tags (grad/<param>); another
  // model's tags carry its name after the family (grad/D/<param>, act/D/<module>,
  // train/D/grad_zeroed, opt/D/lr).
  struct Model {
    std::string name, cls, optimizer;  // optimizer "" when none holds its parameters
  };
  std::vector<Model> models;
  // Two or more models, each with its own optimizer (a GAN's generator and discriminator,
  // an actor and a critic): their losses are adversaries or separate objectives, not one
  // measure of progress.
  bool MultiObjective() const {
    return std::count_if(models.begin(), models.end(), [](const Model& m) { return !m.optimizer.empty(); }) >= 2;
  }
  // The model a parameter or module name (after the family) belongs to: "D" for "D/main.0",
  // "" for a bare name. Only a declared model's name counts (a '/' can be in a tag).
  std::string ModelOf(std::string_view name) const;
  // True for the last module of its model (of two or more) in the watcher's forward order
  // (meta module_order): the model's output, whose values move toward the targets' scale as
  // the model learns.
  bool IsModelOutput(const std::string& module) const;
  // The last module of a model ("" for the bare one) in forward order, "" when none.
  std::string OutputModule(const std::string& model) const;
  // A model's name for a reader: its name, else its class when several models are watched
  // (the first one keeps bare tags), else "model".
  std::string ModelLabel(const std::string& name) const;
  // The optimizer class that steps a model ("" for the bare one), lower-cased: meta `models`,
  // else meta/config `optimizer`; "" when unknown.
  std::string OptimizerOf(const std::string& model) const;
  // It scales each parameter's step by that parameter's own gradient history (Adam and its
  // kin, RMSprop, Adagrad, Adadelta, Adafactor, Lion: the step is about the LR whatever the
  // gradient's size), so a gradient that jumps moves the weights far less than under SGD.
  bool AdaptiveStep(const std::string& model) const;
  // meta `param_dtypes` {param: "float32" | "bfloat16" | ...}; empty when not recorded.
  std::unordered_map<std::string, std::string> param_dtypes;
  // meta `unoptimized_params`: parameters no optimizer holds (requires_grad, not stepped).
  std::set<std::string> unoptimized_params;
  bool unoptimized_params_known = false;
  // meta `params_without_grad`: trainable parameters whose .grad was None at every optimizer
  // step the watcher looked at (1, 2, 4, ...) while others had one: no gradient reaches them.
  std::vector<std::string> params_without_grad;
  // meta `functional_ops`: activation functions called as functions in one forward (F.relu).
  std::vector<std::string> functional_ops;

  // Derived at the current step (NaN when not measurable at this step).
  double loss = kNaN;         // the loss role's value at this step
  double lr = kNaN;           // the lr role's value (latest known)
  double lr_max = 0;          // largest lr seen so far
  double grad_norm = kNaN;    // global gradient norm: the grad_norm role, else from grad/ stats
  double update_ratio = kNaN; // ||update|| / ||weight|| over all parameters with both
  // Each (parameter, step) with both a finite update and gradient mean, non-zero: how many,
  // and how many of them moved the weights the gradient's way (up the loss). Descent moves
  // them against it (SGD: never the same sign; Adam, momentum: under about 2 in 3).
  int64_t update_grad_pairs = 0;
  int64_t update_grad_same_sign = 0;
  int64_t steps_seen = 0;     // frames processed before this one
  int64_t first_step = 0;
  // Gradient clipping seen in the data: the global gradient norm sits at one ceiling value
  // (within 1e-4) at `clip_min_points` steps or more and never above it; 0 when not seen.
  // A script that clips is not told to clip, and a layer's gradient jump under a clip does
  // not reach the update (docs/doctor.md "What the script already does").
  double clip_norm = 0;
  int64_t clip_points = 0;    // steps with the norm at the ceiling
  // The loss of the latest step that logged one is non-finite, and since which step it
  // has been so without a finite value in between (-1: it is finite).
  bool loss_nonfinite = false;
  int64_t loss_nonfinite_since = -1;
  // A negative label value the run trains on with a finite loss: an ignore value (cross
  // entropy's ignore_index: -100 by default, -1 in minGPT-style scripts). PyTorch's
  // cross_entropy/nll_loss raise on CPU (device-assert on CUDA) for a negative target that
  // is not the ignore_index, so a finite loss at such a step means the loss ignored it.
  // NaN until seen.
  double label_ignore_value = kNaN;
  // Facts the differential diagnosis reads (facts.cc: one predicate per fact id of
  // data/knowledge/knowledge.json), kept current as the steps are judged.
  bool weights_constant_at_start = false;  // a weight matrix's first record has min == max
  bool weights_varied_at_start = false;    // a weight matrix's first record has min != max
  double dead_fraction_max = kNaN;         // over modules, each at its latest record
  double saturated_fraction_max = kNaN;
  bool activations_nonfinite_seen = false;  // any act/ record with NaN/Inf
  int64_t grad_steps = 0;                   // steps with gradient statistics
  bool grads_zero_from_start = false;       // every gradient exactly 0 at every such step
  double loss_first = kNaN;                 // the first finite loss
  bool loss_varies = false;                 // a finite loss different from the first seen
  int64_t loss_points = 0;                  // steps with a finite loss
  int64_t grad_zeroed_points = 0;           // train/grad_zeroed (any model's) values seen
  int64_t grad_not_zeroed_points = 0;       // of which 0: the gradients were not zeroed
  double acc_latest = kNaN;                 // the training accuracy (role acc), latest value

  // What kinds of data the run has had so far (for "not checked and why").
  bool has_grad_stats = false, has_weight_stats = false, has_update_stats = false;
  bool has_act_stats = false, has_input_stats = false, has_dead = false, has_saturated = false;
  bool has_time = false, has_memory = false, has_census = false, has_grad_zeroed = false;
  bool has_labels = false;
  // A tag that marks a reinforcement-learning run (rollout/ep_rew_mean, "average reward
  // score", actor/critic losses), "" if none. Its loss is a TD or policy-gradient loss that
  // tracks moving targets and each batch's advantages, not progress: the loss-curve checks
  // do not judge it (not_checked says so).
  std::string rl_tag;
  // Offline only (NaN while streaming): the loss's level at the end of the run, the median
  // of its last finite points. The whole run is known before its first step is judged, so
  // an early detector can tell a start the run recovered from from one it never did.
  double loss_end_level = kNaN;

  // Index of a module in forward order (or -1).
  int ModuleIndex(const std::string& module) const;
  // Index of a parameter in forward order: by its module's forward position when known,
  // else by parameter order (or -1).
  int ParamIndex(const std::string& param) const;
  // "layers.0.weight" -> "layers.0"
  static std::string ModuleOfParam(const std::string& param);
  // The module's type from meta `module_types`, else "" (callers fall back to its name).
  std::string ModuleType(const std::string& module) const;
  // The parameter's number of dimensions from meta `param_shapes`, else -1.
  int ParamDims(const std::string& param) const;
};

// Where a detector's findings go: the doctor (doctor.cc), which merges, dates and holds them.
class FindingSink {
 public:
  virtual void Report(Finding finding) = 0;
  virtual void Amend(Finding finding) = 0;
  virtual void Hold(Finding finding) = 0;
  virtual std::optional<Finding> TakeHeld(const std::string& code, const std::string& location) = 0;

 protected:
  ~FindingSink() = default;
};

class DetectorContext {
 public:
  DetectorContext(bool online, const RunFacts& facts, const FlightRecorder& flight, FindingSink* sink)
      : facts(facts), flight(flight), online_(online), sink_(sink) {}
  // Emits a finding. The doctor merges it with an open finding of the same code and
  // location (extending last_step) and fills actions from the knowledge base.
  void Report(Finding finding) const { sink_->Report(std::move(finding)); }
  // Replaces the summary, evidence and causes of the open finding with this code and
  // location (severity only goes up; `step` and `detected_at` stay): a detector that
  // alerted early and knows the whole story at the end. Opens it when none is open.
  void Amend(Finding finding) const { sink_->Amend(std::move(finding)); }
  // A finding whose truth the end of the run may undo (a climb the loss comes back from).
  // Online it is reported now: the user needs the warning while training. Offline the
  // doctor holds it, dated (evidence "detected_at": the step being judged), until the
  // detector's Finish takes it back (TakeHeld) with the whole run in view and reports it or
  // lets it go; a later sighting extends the held one's range, a worse one its severity.
  void ReportOrHold(Finding finding) const {
    if (online_) {
      sink_->Report(std::move(finding));
    } else {
      sink_->Hold(std::move(finding));
    }
  }
  std::optional<Finding> TakeHeld(const std::string& code, const std::string& location) const {
    return sink_->TakeHeld(code, location);
  }
  // Whether steps are judged as the run goes (online) or with the whole run known (offline,
  // where Finish may judge a whole curve at once and date the finding by hindsight).
  bool online() const { return online_; }

  const RunFacts& facts;
  const FlightRecorder& flight;

 private:
  bool online_;
  FindingSink* sink_;
};

class Detector {
 public:
  virtual ~Detector() = default;
  virtual const char* name() const = 0;
  // The codes it emits and the inputs it needs (inputs.h): not_checked is derived from them.
  virtual DetectorSpec spec() const = 0;
  // Called once per step, in step order.
  virtual void OnStep(const StepFrame& frame, const DetectorContext& ctx) = 0;
  // Called once after the last step.
  virtual void Finish(const DetectorContext& ctx) {}
  // Judges the loss as a measure of progress (spikes, divergence, plateau, ...): not run on
  // a reinforcement-learning run (RunFacts::rl_tag), whose loss is not one.
  virtual bool judges_loss_progress() const { return false; }
};

// Sorts causes by confidence, drops those under 0.05 and caps confidence at 0.95.
void RankCauses(std::vector<Cause>* causes);
// Adds `confidence` to cause `id` (creating it), as independent evidence: c = 1-(1-c)(1-x).
void RaiseCause(std::vector<Cause>* causes, const std::string& id, double confidence);

}  // namespace trainscope::doctor
