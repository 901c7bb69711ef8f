#include "doctor/facts.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "doctor/detector.h"
#include "doctor/detectors/numerics.h"
#include "doctor/knowledge.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

FactState Of(bool known, bool value) { return !known ? FactState::kUnknown : value ? FactState::kTrue : FactState::kFalse; }

bool LrCollapsed(const RunFacts& f) { return std::isfinite(f.lr) && f.lr_max > 0 && f.lr < 1e-6 * f.lr_max; }

// The parameter a finding is about: its location, when that is a recorded parameter name.
const std::string* DtypeOf(const RunFacts& f, const Finding& finding) {
  auto it = f.param_dtypes.find(finding.location);
  return it == f.param_dtypes.end() ? nullptr : &it->second;
}

}  // namespace

const std::vector<FactInfo>& Facts() {
  static const std::vector<FactInfo> facts = {
      {"param_dtype_not_16bit", "the parameter is stored in a 32- or 64-bit float (meta param_dtypes)",
       [](const RunFacts& f, const Finding& finding) {
         if (const std::string* d = DtypeOf(f, finding)) return Of(true, !IsSixteenBitFloat(*d));
         if (f.param_dtypes.empty()) return FactState::kUnknown;
         const bool any16 = std::any_of(f.param_dtypes.begin(), f.param_dtypes.end(),
                                        [](const auto& p) { return IsSixteenBitFloat(p.second); });
         return Of(true, !any16);
       }},
      {"lr_collapsed", "the learning rate is below 1e-6 of its maximum",
       [](const RunFacts& f, const Finding&) { return Of(std::isfinite(f.lr) && f.lr_max > 0, LrCollapsed(f)); }},
      {"steps_large", "the finding's own evidence shows large steps (update/weight ratio >= 1e-2, or an adaptive "
       "optimizer's LR >= 1e-2): evidence.lr_too_low_excluded",
       [](const RunFacts&, const Finding& finding) {
         return Of(true, finding.evidence_json.find("\"lr_too_low_excluded\"") != std::string::npos);
       }},
      {"loss_settled", "the loss settled on one level: its recent points vary by under 0.1 % of it (evidence.settled)",
       [](const RunFacts&, const Finding& finding) {
         return Of(true, finding.evidence_json.find("\"settled\":true") != std::string::npos);
       }},
      {"updates_ascend", "the weights moved the gradient's way, up the loss: the update's mean has the gradient "
       "mean's sign at >= 90 % of >= 10 (parameter, step) pairs (descent gives the opposite sign)",
       [](const RunFacts& f, const Finding&) {
         return Of(f.update_grad_pairs >= 10,
                   f.update_grad_same_sign >= 0.9 * static_cast<double>(f.update_grad_pairs));
       }},
      {"grad_clipping_seen", "the script clips the gradient norm (it sits at one ceiling)",
       [](const RunFacts& f, const Finding&) { return Of(f.has_grad_stats || f.roles.Has(Role::kGradNorm), f.clip_norm > 0); }},
      {"weights_not_constant", "every weight matrix started with differing values (min != max at its first record)",
       [](const RunFacts& f, const Finding&) {
         return Of(f.weights_constant_at_start || f.weights_varied_at_start, !f.weights_constant_at_start);
       }},
      {"units_alive", "the activation statistics show live units (dead fraction < 0.5, saturated fraction < 0.5)",
       [](const RunFacts& f, const Finding&) {
         const bool known = !std::isnan(f.dead_fraction_max) || !std::isnan(f.saturated_fraction_max);
         return Of(known, !(f.dead_fraction_max >= 0.5) && !(f.saturated_fraction_max >= 0.5));
       }},
      {"grads_zero_from_start", "every gradient has been exactly 0 since the first step",
       [](const RunFacts& f, const Finding&) { return Of(f.grad_steps > 0, f.grads_zero_from_start); }},
      {"loss_constant", "the loss has had one value at each of >= 20 steps (a loss that does not depend on the model's output)",
       [](const RunFacts& f, const Finding&) { return Of(f.loss_points >= 20, !f.loss_varies && !f.loss_nonfinite); }},
      {"loss_finite_and_varies", "the loss is finite and changes from step to step",
       [](const RunFacts& f, const Finding&) { return Of(!std::isnan(f.loss_first), f.loss_varies && !f.loss_nonfinite); }},
      {"activations_finite", "every recorded activation was finite",
       [](const RunFacts& f, const Finding&) { return Of(f.has_act_stats, !f.activations_nonfinite_seen); }},
      {"grads_not_zeroed",
       "train/grad_zeroed was 0 at >= half of >= 10 recorded optimizer steps: each update is the sum of the "
       "gradients so far (what GRAD_NOT_ZEROED reports)",
       [](const RunFacts& f, const Finding&) {
         return Of(f.grad_zeroed_points >= 10, 2 * f.grad_not_zeroed_points >= f.grad_zeroed_points);
       }},
      {"label_noise_evidence",
       "the training accuracy rose above chance but plateaus below 1 while the training loss floors well above 0 "
       "(what a share of random labels does: the model learns the clean share and no more)",
       [](const RunFacts& f, const Finding&) {
         const double floor = !std::isnan(f.loss_end_level) ? f.loss_end_level : f.loss;
         const double chance = f.num_classes > 1 ? 1.0 / f.num_classes : 0.5;
         // A model stuck at chance learns nothing at all: that is no evidence about the labels.
         return Of(!std::isnan(f.acc_latest) && !std::isnan(floor),
                   f.acc_latest > chance + 0.1 && f.acc_latest < 0.95 && floor > 0.1);
       }},
  };
  return facts;
}

const FactInfo* FindFact(std::string_view id) {
  for (const FactInfo& f : Facts()) {
    if (id == f.id) return &f;
  }
  return nullptr;
}

void ApplyDifferential(Finding* finding, const RunFacts& facts, const KnowledgeBase& kb) {
  if (finding->causes.empty()) return;
  json evidence = json::parse(finding->evidence_json, nullptr, false);
  if (!evidence.is_object()) evidence = json::object();
  json excluded = json::array();
  struct Ranked {
    Cause cause;
    bool requirements_hold;
    bool confirmed = false;
    std::vector<std::string> held;  // the required and confirming facts that hold
  };
  std::vector<Ranked> kept;
  for (const Cause& c : finding->causes) {
    const CauseInfo* info = kb.Cause(c.id);
    std::string excluded_by;
    if (info) {
      for (const std::string& id : info->excluded_by) {
        const FactInfo* fact = FindFact(id);
        if (fact && fact->eval(facts, *finding) == FactState::kTrue) {
          excluded_by = id;
          break;
        }
      }
    }
    if (!excluded_by.empty()) {
      excluded.push_back({{"cause", c.id}, {"fact", excluded_by}});
      continue;
    }
    Ranked r{c, true, {}};
    if (info) {
      for (const std::string& id : info->required) {
        const FactInfo* fact = FindFact(id);
        if (fact && fact->eval(facts, *finding) == FactState::kTrue) {
          r.held.push_back(id);
        } else {
          r.requirements_hold = false;
        }
      }
      for (const std::string& id : info->confirmed_by) {
        const FactInfo* fact = FindFact(id);
        if (fact && fact->eval(facts, *finding) == FactState::kTrue) {
          r.held.push_back(id);
          r.confirmed = true;
        }
      }
    }
    if (r.confirmed) r.cause.confidence = std::max(r.cause.confidence, 0.8);
    if (!r.requirements_hold) r.cause.confidence = std::min(r.cause.confidence, 0.3);
    kept.push_back(std::move(r));
  }
  std::stable_sort(kept.begin(), kept.end(), [](const Ranked& a, const Ranked& b) {
    if (a.requirements_hold != b.requirements_hold) return a.requirements_hold;
    if (a.confirmed != b.confirmed) return a.confirmed;
    return a.cause.confidence > b.cause.confidence;
  });
  finding->causes.clear();
  for (const Ranked& r : kept) finding->causes.push_back(r.cause);
  if (!excluded.empty()) evidence["excluded"] = excluded;
  std::string decided;
  if (!kept.empty()) {
    const Ranked& first = kept.front();
    decided = "first cause " + first.cause.id;
    if (!first.held.empty()) {
      decided += ": ";
      for (size_t i = 0; i < first.held.size(); ++i) decided += (i ? ", " : "") + first.held[i];
      decided += " hold";
    } else {
      decided += " by the detector's evidence";
    }
  } else {
    decided = "no cause left";
  }
  if (!excluded.empty()) {
    decided += "; excluded ";
    for (size_t i = 0; i < excluded.size(); ++i) {
      decided += (i ? ", " : "") + excluded[i]["cause"].get<std::string>() + " (" +
                 excluded[i]["fact"].get<std::string>() + ")";
    }
  }
  evidence["decided_by"] = decided;
  finding->evidence_json = evidence.dump();
}

namespace {

struct Contradiction {
  const char* fact;
  std::vector<const char*> phrases;  // lower-case; an action containing one is dropped
};

const std::vector<Contradiction>& Contradictions() {
  static const std::vector<Contradiction> table = {
      {"grad_clipping_seen", {"clip"}},
      {"lr_collapsed", {"raise the learning rate", "higher learning rate", "lr range test", "learning-rate range test"}},
      {"steps_large", {"raise the learning rate", "higher learning rate"}},
      // Each step applies every gradient so far: a larger lr multiplies a sum that only grows.
      {"grads_not_zeroed", {"raise the learning rate", "higher learning rate", "lr range test"}},
      {"param_dtype_not_16bit", {"master weights", "kahan", "stochastic rounding"}},
  };
  return table;
}

}  // namespace

void FitActionsToFacts(Finding* finding, const RunFacts& facts) {
  json evidence = json::parse(finding->evidence_json, nullptr, false);
  const bool have_evidence = evidence.is_object();
  std::vector<std::string> kept;
  json dropped = json::array();
  // A loop with no optimizer (weights updated by hand) zeroes through the model.
  const bool no_optimizer = !facts.models.empty() &&
                            std::all_of(facts.models.begin(), facts.models.end(),
                                        [](const RunFacts::Model& m) { return m.optimizer.empty(); });
  for (const std::string& action : finding->actions) {
    const std::string lower = Lower(action);
    const char* against = nullptr;
    for (const Contradiction& c : Contradictions()) {
      const bool said = std::any_of(c.phrases.begin(), c.phrases.end(),
                                    [&](const char* p) { return lower.find(p) != std::string::npos; });
      const FactInfo* fact = said ? FindFact(c.fact) : nullptr;
      if (fact && fact->eval(facts, *finding) == FactState::kTrue) {
        against = c.fact;
        break;
      }
    }
    if (against) {
      dropped.push_back({{"action", action}, {"fact", against}});
      continue;
    }
    std::string fitted = action;
    if (const size_t at = fitted.find("optimizer.zero_grad("); no_optimizer && at != std::string::npos) {
      fitted.replace(at, std::string("optimizer.").size(), "model.");
    }
    // The numbers the evidence gives: the run's learning rate, and where to take it.
    const double lr = facts.lr;
    if (std::isfinite(lr) && lr > 0 && fitted.find(" (from ") == std::string::npos) {
      if (lower.find("lower the learning rate") != std::string::npos || lower.find("lower learning rate") != std::string::npos) {
        fitted += " (from " + FormatNumber(lr, 3) + " to about " + FormatNumber(lr / 3, 2) + ")";
      } else if (lower.find("raise the learning rate") != std::string::npos ||
                 lower.find("higher learning rate") != std::string::npos) {
        fitted += " (from " + FormatNumber(lr, 3) + " to about " + FormatNumber(lr * 10, 2) + ")";
      }
    }
    kept.push_back(std::move(fitted));
  }
  finding->actions = std::move(kept);
  if (have_evidence && !dropped.empty()) {
    evidence["actions_dropped"] = dropped;
    finding->evidence_json = evidence.dump();
  }
}

}  // namespace trainscope::doctor
