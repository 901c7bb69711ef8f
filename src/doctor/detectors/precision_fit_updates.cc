// What the precision fit makes of the recorded updates: per parameter, the share of its
// values that did not move although the gradient did not vanish (observed) or that fall below
// half a bfloat16 ulp of their weight (estimated), reported as BF16_STALE_UPDATE for 16-bit
// weights and PARAM_NOT_UPDATED for tensors that never move or get no gradient at all.
#include "doctor/detectors/numerics.h"

#ifdef TRAINSCOPE_WITH_NUMERICS
#include <algorithm>
#include <array>
#include <cmath>

#include "core/tag.h"
#include "doctor/detectors/precision_fit_state.h"
#include "doctor/param_roles.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

// Share of a tensor's values below `bins_below` exponent bins of the other (the update
// below half an ulp of its weight), assuming the two magnitudes are independent within the
// tensor: sum over weight bins e of P(weight in e) * P(update in a bin <= e - offset).
double IndependentShareBelow(const TensorStats& update, const TensorStats& weight, int offset) {
  const double n_update = static_cast<double>(update.numel);
  const double n_weight = static_cast<double>(weight.numel);
  if (n_update == 0 || n_weight == 0) return 0;
  std::array<double, TensorStats::kExponentBins + 1> below{};  // below[b] = P(update nonzero, bin < b)
  for (int b = 0; b < TensorStats::kExponentBins; ++b) {
    below[b + 1] = below[b] + static_cast<double>(update.exponent_counts[b]) / n_update;
  }
  double share = 0;
  for (int e = 0; e < TensorStats::kExponentBins; ++e) {
    const uint64_t c = weight.exponent_counts[e];
    if (!c) continue;
    const int limit = std::clamp(e - offset + 1, 0, TensorStats::kExponentBins);  // bins <= e - offset
    share += static_cast<double>(c) / n_weight * below[limit];
  }
  return share;
}

// The module a parameter belongs to: its name up to the last '.' ("conv1" for "conv1.weight").
std::string ModuleOfParam(const std::string& param) {
  const size_t dot = param.rfind('.');
  return dot == std::string::npos ? param : param.substr(0, dot);
}

}  // namespace

// BF16_STALE_UPDATE: update/<p> beside weight/<p> and grad/<p> of the same step.
void PrecisionFitDetector::State::TrackUpdate(const std::string& tag, const TensorStats& s, const StepFrame& frame,
                                              bool skipped, double lr, const PrecisionFitOptions& options) {
  std::string_view param;
  if (tags::kUpdate.Holds(tag, &param) && s.numel >= options.min_numel && !skipped &&
      !(std::isfinite(lr) && lr <= 0)) {
    const TensorStats* w = frame.Stats(tags::kWeight.Of(param));
    const TensorStats* g = frame.Stats(tags::kGrad.Of(param));
    if (w && g && g->numel == s.numel && s.finite() == s.numel && g->finite() == g->numel) {
      auto [it, fresh] = stale.try_emplace(std::string(param));
      if (fresh) stale_order.emplace_back(param);
      Stale& x = it->second;
      const double n = static_cast<double>(s.numel);
      // Observed: the weight did not move although its gradient was not zero.
      const double observed = std::max(0.0, (static_cast<double>(s.zeros) - static_cast<double>(g->zeros)) / n);
      ++x.points;
      x.observed_sum += observed;
      x.observed_max = std::max(x.observed_max, observed);
      if (x.first_step < 0) {
        x.first_step = frame.step;
        x.grad_sum = g->sum, x.grad_sum_squares = g->sum_squares, x.grad_min = g->min, x.grad_max = g->max;
      } else if (g->sum != x.grad_sum || g->sum_squares != x.grad_sum_squares || g->min != x.grad_min ||
                 g->max != x.grad_max) {
        x.grad_changes = true;
      }
      x.last_step = frame.step;
      if (observed >= options.stale_fraction && x.first_bad < 0) x.first_bad = frame.step;
      x.numel = s.numel;
      x.weight_abs_max = w->abs_max;
      x.update_abs_max = s.abs_max;
      x.update_rms = std::sqrt(s.sum_squares / n);
      if (s.has_histogram && w->has_histogram) {
        // Estimated for bfloat16: an update is lost below half an ulp of its weight,
        // 2^(e - 8) for a weight in [2^e, 2^(e+1)): update bins <= e - 9.
        const double est = IndependentShareBelow(s, *w, bf16->layout.mantissa_bits + 2);
        ++x.est_points;
        x.est_sum += est;
      }
    }
  }
}

// BF16_STALE_UPDATE: observed (the weight did not move) or, for declared bfloat16 weights,
// estimated from the update and weight histograms; PARAM_NOT_UPDATED beside it.
void PrecisionFitDetector::ReportUpdates(const DetectorContext& ctx) const {
  const State& st = *state_;
  std::vector<PrecisionFitLost> lost;
  // Observed losses count when they are a real share of the model's update values: a
  // conv bias before a BatchNorm has gradients near zero and loses its updates in FP32
  // too, harmlessly; bfloat16 weights lose most of every matrix's.
  double observed_values = 0, all_values = 0;
  for (const std::string& p : st.stale_order) {
    const State::Stale& x = st.stale.at(p);
    const double observed = x.points ? x.observed_sum / static_cast<double>(x.points) : 0;
    all_values += static_cast<double>(x.numel);
    if (x.points >= options_.stale_min_points) observed_values += observed * static_cast<double>(x.numel);
  }
  const bool observed_matters = all_values > 0 && observed_values / all_values >= options_.stale_model_fraction;
  // A lost update is bfloat16's only for a parameter stored in 16 bits: meta `param_dtypes`
  // says so, or (without it) the config declares bfloat16 weights, or the loss is partial:
  // rounding loses the updates below half an ulp of their weight and keeps the others,
  // while a tensor no optimizer steps (or one stepped with an LR of ~0) loses them all.
  // A weight that does not move at all is PARAM_NOT_UPDATED (below).
  const RunFacts& facts = ctx.facts;
  auto sixteen_bit = [&](const std::string& p, double observed) {
    auto it = facts.param_dtypes.find(p);
    if (it != facts.param_dtypes.end()) return IsSixteenBitFloat(it->second);
    if (!facts.param_dtypes.empty()) return false;
    return st.declared.bf16_weights || observed < options_.not_updated_fraction;
  };
  std::vector<std::pair<std::string, const State::Stale*>> not_updated;
  size_t moving = 0;
  for (const std::string& p : st.stale_order) {
    const State::Stale& x = st.stale.at(p);
    const double observed = x.points ? x.observed_sum / static_cast<double>(x.points) : 0;
    const double estimated = x.est_points ? x.est_sum / static_cast<double>(x.est_points) : 0;
    if (x.points >= options_.stale_min_points && observed < 0.5) ++moving;
    const bool observed_lost =
        x.points >= options_.stale_min_points && observed >= options_.stale_fraction && x.grad_changes;
    const bool is16 = sixteen_bit(p, observed);
    if (observed_lost && !is16) {
      if (observed >= options_.not_updated_fraction &&
          (facts.unoptimized_params.count(p) || ClassifyParam(p, facts) == ParamRole::kWeight)) {
        not_updated.emplace_back(p, &x);
      }
      continue;
    }
    if (observed_matters && observed_lost) {
      lost.push_back({p, observed, true, &x});
    } else if (is16 && (st.declared.bf16_weights || facts.param_dtypes.count(p)) &&
               x.est_points >= options_.stale_min_points && estimated >= options_.stale_fraction) {
      lost.push_back({p, estimated, false, &x});
    }
  }
  if (!not_updated.empty()) ReportNotUpdated(not_updated, moving, ctx);
  if (!ctx.facts.params_without_grad.empty() && moving > 0) {
    std::vector<std::string> moving_params;
    for (const std::string& p : st.stale_order) {
      const State::Stale& x = st.stale.at(p);
      if (x.points >= options_.stale_min_points && x.observed_sum / static_cast<double>(x.points) < 0.5) {
        moving_params.push_back(p);
      }
    }
    ReportWithoutGradient(moving, moving_params, ctx);
  }
  if (!lost.empty()) ReportStaleUpdates(std::move(lost), ctx);
}

void PrecisionFitDetector::ReportStaleUpdates(std::vector<PrecisionFitLost> lost, const DetectorContext& ctx) const {
  const State& st = *state_;
  // The parameter losing the most updates (share x size) first: a 4-element bias losing
  // all of them matters less than a weight matrix losing most.
  std::stable_sort(lost.begin(), lost.end(), [](const PrecisionFitLost& a, const PrecisionFitLost& b) {
    const double la = a.share * static_cast<double>(a.x->numel), lb = b.share * static_cast<double>(b.x->numel);
    return la != lb ? la > lb : a.param < b.param;
  });
  const PrecisionFitLost& worst = lost.front();
  double lost_values = 0, all_values = 0;
  for (const std::string& p : st.stale_order) {
    const State::Stale& x = st.stale.at(p);
    all_values += static_cast<double>(x.numel);
    auto it = std::find_if(lost.begin(), lost.end(), [&](const PrecisionFitLost& l) { return l.param == p; });
    if (it != lost.end()) lost_values += it->share * static_cast<double>(x.numel);
  }
  const double overall = all_values > 0 ? lost_values / all_values : 0;
  Finding f;
  f.code = "BF16_STALE_UPDATE";
  f.severity = Severity::kWarning;
  f.step = worst.x->first_bad >= 0 ? worst.x->first_bad : worst.x->first_step;
  f.last_step = worst.x->last_step;
  f.location = worst.param;
  json layers = json::array();
  for (size_t i = 0; i < lost.size() && i < 10; ++i) {
    layers.push_back({{"param", lost[i].param}, {"fraction_lost", Num(lost[i].share)},
                      {"how", lost[i].observed ? "observed" : "estimated"}});
  }
  const double ulp_half = std::ldexp(worst.x->weight_abs_max, -8);
  f.summary = FormatNumber(100 * worst.share, 3) + " % of " + worst.param + "'s updates are lost (" +
              (worst.observed ? "observed: the weight did not change although its gradient was not zero"
                              : "estimated for bfloat16 weights: updates below half a bfloat16 ulp of their weight") +
              ", mean over " + std::to_string(worst.observed ? worst.x->points : worst.x->est_points) +
              " recorded steps); " + std::to_string(lost.size()) + " parameter" + (lost.size() == 1 ? "" : "s") +
              " affected, " + FormatNumber(100 * overall, 3) + " % of all updates recorded. Updates of rms " + FormatNumber(worst.x->update_rms, 3) + " vs weights up to " +
              FormatNumber(worst.x->weight_abs_max, 3) + " (half a bfloat16 ulp there: " + FormatNumber(ulp_half, 3) +
              ")";
  f.evidence_json = json{{"param", worst.param},
                         {"fraction_lost", Num(worst.share)},
                         {"fraction_lost_all_params", Num(overall)},
                         {"how", worst.observed ? "observed" : "estimated"},
                         {"method", worst.observed
                                        ? "share of the update's values exactly zero minus the gradient's, per recorded step"
                                        : "per weight binade e: P(weight in e) x P(|update| < 2^(e-8)), assuming "
                                          "update and weight magnitudes independent within the tensor"},
                         {"steps", json::array({worst.x->first_step, worst.x->last_step})},
                         {"points", worst.x->points},
                         {"max_fraction_lost", Num(worst.x->observed_max)},
                         {"weight_abs_max", Num(worst.x->weight_abs_max)},
                         {"update_abs_max", Num(worst.x->update_abs_max)},
                         {"update_rms", Num(worst.x->update_rms)},
                         {"numel", worst.x->numel},
                         {"layers", layers},
                         {"precision", st.declared.bf16_weights ? st.declared.bf16_why : "observed updates"}}
                      .dump();
  f.causes = {{"precision_overflow", 0.5}, {"lr_too_low", 0.2}};
  f.actions = {"Keep FP32 master weights: leave the parameters in float32 and compute in bfloat16 with "
               "torch.autocast(device_type, dtype=torch.bfloat16); the optimizer then adds each update to the "
               "float32 copy",
               "Or add the updates with compensated (Kahan) summation, or stochastic rounding, in the optimizer",
               "A larger LR does not fix it: a bfloat16 weight moves only by updates of at least half its ulp "
               "(2^-8 of its magnitude)"};
  ctx.Report(std::move(f));
}

void PrecisionFitDetector::ReportNotUpdated(const std::vector<std::pair<std::string, const PrecisionFitStale*>>& params,
                                            size_t moving, const DetectorContext& ctx) const {
  const RunFacts& facts = ctx.facts;
  // The largest parameter that never moves names the finding; every one is listed.
  auto worst = std::max_element(params.begin(), params.end(),
                                [](const auto& a, const auto& b) { return a.second->numel < b.second->numel; });
  const std::string& p = worst->first;
  const auto* x = worst->second;
  bool any_unoptimized = false;
  json names = json::array();
  for (const auto& [name, stale] : params) {
    any_unoptimized |= facts.unoptimized_params.count(name) > 0;
    if (names.size() < 20) names.push_back(name);
  }
  const bool lr_known = std::isfinite(facts.lr) && facts.lr_max > 0;
  const bool lr_collapsed = lr_known && facts.lr < 1e-6 * facts.lr_max;
  Finding f;
  f.code = "PARAM_NOT_UPDATED";
  // Some parameters move and these never do: a layer left out of training. Every parameter
  // stopping together (an LR annealed to ~0, an optimizer that converged) is information.
  f.severity = any_unoptimized || (moving > 0 && !lr_collapsed) ? Severity::kWarning : Severity::kInfo;
  f.step = x->first_bad >= 0 ? x->first_bad : x->first_step;
  f.last_step = x->last_step;
  f.location = p;
  f.summary = std::to_string(params.size()) + " parameter" + (params.size() == 1 ? "" : "s") + " never change (" + p +
              " among them: its update is exactly 0 at " + std::to_string(x->points) +
              " recorded steps while its gradient is not)";
  std::vector<Cause> causes;
  json ev = {{"param", p}, {"params", names}, {"count", params.size()}, {"points", x->points},
             {"steps", json::array({x->first_step, x->last_step})}, {"params_that_move", moving}};
  if (auto it = facts.param_dtypes.find(p); it != facts.param_dtypes.end()) ev["dtype"] = it->second;
  if (facts.unoptimized_params_known) {
    ev["unoptimized_params"] = json(std::vector<std::string>(facts.unoptimized_params.begin(), facts.unoptimized_params.end()));
    if (any_unoptimized) {
      RaiseCause(&causes, "param_not_in_optimizer", 0.9);
      f.summary += "; no optimizer holds " + std::string(facts.unoptimized_params.count(p) ? p : "them");
    }
  } else if (moving > 0) {
    RaiseCause(&causes, "param_not_in_optimizer", 0.6);
  }
  if (lr_known) {
    ev["lr"] = Num(facts.lr);
    ev["lr_max"] = Num(facts.lr_max);
    if (lr_collapsed) {
      RaiseCause(&causes, "lr_collapsed", 0.85);
      f.summary += "; the learning rate is " + FormatNumber(facts.lr, 3) + ", " +
                   FormatNumber(facts.lr / facts.lr_max, 2) + " of its maximum " + FormatNumber(facts.lr_max, 3);
    }
  } else {
    RaiseCause(&causes, "lr_collapsed", 0.2);
  }
  if (moving == 0 && !lr_collapsed) RaiseCause(&causes, "optimizer_stopped", 0.5);
  f.evidence_json = ev.dump();
  f.causes = std::move(causes);
  ctx.Report(std::move(f));
}

void PrecisionFitDetector::ReportWithoutGradient(size_t moving, const std::vector<std::string>& moving_params,
                                                 const DetectorContext& ctx) const {
  const RunFacts& facts = ctx.facts;
  const std::vector<std::string>& blocked = facts.params_without_grad;
  auto order_of = [&](const std::string& param) -> int64_t {
    const auto it = std::find(facts.module_order.begin(), facts.module_order.end(), ModuleOfParam(param));
    return it == facts.module_order.end() ? -1 : it - facts.module_order.begin();
  };
  // A blocked layer that runs before a layer that learns: the graph is cut on the way to
  // the loss (a .detach(), .item(), torch.no_grad()). A blocked layer after every learning
  // one is a head whose output the loss does not use: information.
  int64_t last_moving = -1;
  for (const std::string& p : moving_params) last_moving = std::max(last_moving, order_of(p));
  std::string cut;  // the blocked parameter nearest the cut: the latest one before a learning layer
  int64_t cut_order = -1;
  for (const std::string& p : blocked) {
    const int64_t o = order_of(p);
    if (o >= 0 && o < last_moving && o >= cut_order) {
      cut = p;
      cut_order = o;
    }
  }
  const bool upstream = !cut.empty();
  using json = nlohmann::json;
  Finding f;
  f.code = "PARAM_NOT_UPDATED";
  f.severity = upstream ? Severity::kWarning : Severity::kInfo;
  f.step = facts.first_step;
  f.location = upstream ? cut : blocked.front();
  const std::string n = std::to_string(blocked.size());
  f.summary = "No gradient reaches " + n + " parameter" + (blocked.size() == 1 ? "" : "s") + " (" + f.location +
              (blocked.size() > 1 ? " among them" : "") + "): .grad is None at every optimizer step while " +
              std::to_string(moving) + " other" + (moving == 1 ? " has" : "s have") + " one" +
              (upstream ? "; the graph is cut after " + ModuleOfParam(cut) + ", before layers that learn"
                        : "; they come after every layer that learns (an output the loss does not use)");
  json names = json::array();
  for (const std::string& p : blocked) {
    if (names.size() < 20) names.push_back(p);
  }
  json ev = {{"param", f.location}, {"params_without_grad", names}, {"count", blocked.size()},
             {"params_that_move", moving}, {"cut_before_learning_layers", upstream}};
  f.evidence_json = ev.dump();
  f.causes = {{"gradient_blocked", upstream ? 0.9 : 0.6}};
  ctx.Report(std::move(f));
}

}  // namespace trainscope::doctor
#endif  // TRAINSCOPE_WITH_NUMERICS
