#include "doctor/inputs.h"

#include <algorithm>
#include <set>

#include "doctor/detector.h"

namespace trainscope::doctor {

namespace {

bool NoGradStats(const InputView& v) { return !v.facts.has_grad_stats; }

std::string LossReason(const InputView& v) {
  // Name what the run does have, so the user can tell a missing loss from a misnamed one.
  std::string seen;
  size_t listed = 0;
  for (const std::string& tag : v.scalars) {
    if (listed == 12) {
      seen += ", ...";
      break;
    }
    seen += (listed++ ? ", " : "") + tag;
  }
  return "no series looks like the training loss (no tag named like loss/train_loss; name it in the run "
         "meta key `roles`, or `--role loss=TAG` on import)" +
         (seen.empty() ? std::string() : "; the scalar series are: " + seen);
}

std::string ProgressLossReason(const InputView& v) {
  if (v.facts.rl_tag.empty()) {
    std::string names;
    for (const auto& m : v.facts.models) {
      if (m.optimizer.empty()) continue;
      names += (names.empty() ? "" : ", ") + (m.name.empty() ? std::string("the first model") : m.name) +
               (m.cls.empty() ? "" : " (" + m.cls + ", " + m.optimizer + ")");
    }
    return "several models, each with its own optimizer (" + names +
           "): an adversarial or multi-objective run (a GAN, an actor and a critic), whose losses "
           "pull against each other; one rising while the other falls is the game, not a fault. "
           "Non-finite values and each model's gradients and layers are still checked";
  }
  return "a reinforcement-learning run (" + v.facts.rl_tag + "): its loss (" + v.facts.roles.Get(Role::kLoss) +
         ") is a TD or policy-gradient loss that follows moving targets and each batch's advantages, "
         "so its spikes, climbs, plateaus and sign are not faults; judge the return instead";
}

std::string DeadSaturatedReason(const InputView& v) {
  // functional_ops holds every op of the first forward, a module's own among them
  // (nn.LeakyReLU calls leaky_relu): only an op no module of that kind accounts for
  // was applied as a function.
  std::set<std::string> module_kinds;
  for (const auto& [module, type] : v.facts.module_types) module_kinds.insert(Lower(type));
  std::string applied;
  for (const std::string& op : v.facts.functional_ops) {
    std::string kind = Lower(op);
    kind.erase(std::remove(kind.begin(), kind.end(), '_'), kind.end());
    if (module_kinds.count(kind)) continue;
    for (const char* name : {"relu", "sigmoid", "tanh", "leaky_relu", "elu", "gelu", "silu", "hardtanh"}) {
      if (Lower(op) == name) applied += (applied.empty() ? "" : ", ") + op;
    }
  }
  if (!applied.empty()) {
    return "activations applied as functions (" + applied +
           ") are not modules: the per-module statistics carry no dead/saturated fractions for them "
           "(dead units are still found from zero gradient rows, grad_units/)";
  }
  return std::string(
      "activation statistics carry no dead/saturated fractions (no ReLU/sigmoid/tanh modules seen)");
}

}  // namespace

const std::vector<InputInfo>& Inputs() {
  static const std::vector<InputInfo> inputs = {
      {Input::kLoss, "loss curve", [](const InputView& v) { return !v.facts.roles.Has(Role::kLoss); }, LossReason},
      {Input::kProgressLoss, "loss curve",
       [](const InputView& v) {
         return v.facts.roles.Has(Role::kLoss) && (!v.facts.rl_tag.empty() || v.facts.MultiObjective());
       },
       ProgressLossReason},
      {Input::kValLoss, "over-fitting", [](const InputView& v) { return !v.facts.roles.Has(Role::kValLoss); },
       [](const InputView&) { return std::string("no validation loss recorded (log val/loss every few hundred steps)"); }},
      {Input::kMetric, "metric stall",
       [](const InputView& v) { return !v.facts.roles.Has(Role::kValAcc) && !v.facts.roles.Has(Role::kAcc); },
       [](const InputView&) { return std::string("no accuracy or other metric recorded"); }},
      {Input::kMacroF1, "hidden classes", [](const InputView& v) { return !v.facts.roles.Has(Role::kMacroF1); },
       [](const InputView&) {
         return std::string("no macro-F1 recorded next to accuracy (run.log_classification logs it)");
       }},
      {Input::kGradStats, "gradients per layer", NoGradStats,
       [](const InputView& v) {
         return std::string(v.facts.roles.Has(Role::kGradNorm)
                                ? "only a global gradient norm was recorded: explosion is checked on it, but per-layer "
                                  "and by-depth checks need per-parameter gradients (run.watch(model))"
                                : "no gradient statistics recorded (run.watch(model) records them)");
       }},
      {Input::kGradNorm, "gradient explosion",
       [](const InputView& v) { return !v.facts.has_grad_stats && !v.facts.roles.Has(Role::kGradNorm); },
       [](const InputView&) { return std::string("no gradient norm recorded"); }},
      {Input::kWeightUpdates, "weights and updates",
       [](const InputView& v) { return !v.facts.has_weight_stats || !v.facts.has_update_stats; },
       [](const InputView&) {
         return std::string("no weight/update statistics recorded (run.watch(model, optimizer) records them)");
       }},
      {Input::kActivations, "activations", [](const InputView& v) { return !v.facts.has_act_stats; },
       [](const InputView&) {
         return std::string(
             "no activation statistics recorded: a non-finite value can only be traced to a parameter, the "
             "input or the loss, not to the module that produced it");
       }},
      {Input::kStationaryData, "activation drift",
       [](const InputView& v) { return v.facts.has_act_stats && !v.facts.rl_tag.empty(); },
       [](const InputView& v) {
         return "a reinforcement-learning run (" + v.facts.rl_tag +
                "): the states the model sees follow its policy, and a policy head's outputs sharpen as it "
                "learns, so a layer moving away from its early distribution is not a fault";
       }},
      {Input::kDeadSaturated, "dead and saturated units",
       [](const InputView& v) { return v.facts.has_act_stats && !v.facts.has_dead && !v.facts.has_saturated; },
       DeadSaturatedReason},
      {Input::kInputBatch, "input batch",
       [](const InputView& v) { return !v.facts.has_input_stats && !v.facts.has_labels; },
       [](const InputView&) {
         return std::string(
             "no statistics of the input batch recorded: a NaN in the data cannot be told apart from one "
             "made by the model");
       }},
      {Input::kGradZeroed, "zero_grad", [](const InputView& v) { return !v.facts.has_grad_zeroed; },
       [](const InputView&) { return std::string("train/grad_zeroed not recorded (run.watch(model, optimizer))"); }},
      {Input::kLr, "learning rate", [](const InputView& v) { return !v.facts.roles.Has(Role::kLr); },
       [](const InputView&) { return std::string("no learning-rate series found"); }},
      {Input::kStepTime, "step time", [](const InputView& v) { return !v.facts.has_time; },
       [](const InputView&) { return std::string("no step or data-wait timings recorded"); }},
      {Input::kLossScaling, "float16 loss scaling",
       [](const InputView& v) {
         const RoleResolver& r = v.facts.roles;
         return !r.Has(Role::kOverflowSkip) && !r.Has(Role::kSkippedSteps) && !r.Has(Role::kLossScale);
       },
       [](const InputView&) {
         return std::string(
             "no loss-scale or overflow-skip series (DeepSpeed and Megatron-LM logs carry them; with "
             "torch.cuda.amp log amp/loss_scale = scaler.get_scale())");
       }},
      {Input::kMemory, "memory", [](const InputView& v) { return !v.facts.has_memory; },
       [](const InputView&) { return std::string("no memory series (mem/rss, mem/cuda_allocated) recorded"); }},
  };
  return inputs;
}

}  // namespace trainscope::doctor
