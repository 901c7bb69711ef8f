#include "doctor/detectors/nonfinite.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "core/tag.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

bool NonFinite(const TensorStats& s) { return s.nan + s.inf > 0; }

bool Contains(const std::string& hay, std::initializer_list<const char*> needles) {
  for (const char* n : needles) {
    if (hay.find(n) != std::string::npos) return true;
  }
  return false;
}

// Whether a word of `text` (split at non-letters: "to_half" -> to, half; "Sqrt2" -> sqrt)
// equals one of `words` or ends with one (class names: "LogSoftmax" ends with "softmax").
// Whole words, so "experts" is no "exp" and "logits" no "log".
bool HasWord(const std::string& text, std::initializer_list<const char*> words) {
  std::string word;
  auto check = [&]() {
    for (const char* w : words) {
      const size_t n = std::strlen(w);
      if (word == w || (word.size() > n && word.compare(word.size() - n, n, w) == 0 && n >= 4)) return true;
    }
    return false;
  };
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ' ';
    if (std::isalpha(static_cast<unsigned char>(c))) {
      word.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else if (!word.empty()) {
      if (check()) return true;
      word.clear();
    }
  }
  return false;
}

// Whether `ancestor` is a strict ancestor module of `module` ("enc" of "enc.0").
bool IsAncestor(const std::string& ancestor, const std::string& module) {
  return module.size() > ancestor.size() && module.compare(0, ancestor.size(), ancestor) == 0 &&
         module[ancestor.size()] == '.';
}

}  // namespace

bool LabelsOutOfRange(const StepFrame& frame, const RunFacts& facts, double* min_label, double* max_label) {
  const double* lo = frame.Scalar(tags::kInputLabelMin);
  const double* hi = frame.Scalar(tags::kInputLabelMax);
  *min_label = lo ? *lo : kNaN;
  *max_label = hi ? *hi : kNaN;
  // -100 is PyTorch's default ignore_index; any other negative value the run trained on with
  // a finite loss is the script's own (RunFacts::label_ignore_value).
  if (lo && *lo < 0 && *lo != -100 && *lo != facts.label_ignore_value) return true;
  if (hi && facts.num_classes > 0 && *hi >= facts.num_classes) return true;
  return false;
}

void LabelRangeDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  const std::string& loss_tag = facts.roles.Get(Role::kLoss);
  const double* loss = loss_tag.empty() ? nullptr : frame.Scalar(loss_tag);
  // A later step trained with a finite loss: the negative labels before it were ignored.
  if (pending_ && frame.step > pending_->step && loss && std::isfinite(*loss)) pending_.reset();
  double lo, hi;
  if (!LabelsOutOfRange(frame, facts, &lo, &hi)) return;
  const bool above = facts.num_classes > 0 && hi >= facts.num_classes;
  if (above || (loss && !std::isfinite(*loss))) {
    Report(frame.step, lo, hi, above ? "" : "the loss is non-finite at that step", ctx);
    return;
  }
  // A negative label with no loss at this step: used out of range only if the run stops
  // there (PyTorch raises); judged at the next loss or the run's end.
  if (!pending_) pending_ = Pending{frame.step, lo, hi};
}

void LabelRangeDetector::Finish(const DetectorContext& ctx) {
  if (!pending_) return;
  const bool crashed = ctx.facts.meta.count("exception") > 0;
  if (crashed) Report(pending_->step, pending_->lo, pending_->hi, "the run ended in an exception after it", ctx);
  pending_.reset();
}

void LabelRangeDetector::Report(int64_t step, double lo, double hi, const std::string& why,
                                const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  Finding f;
  f.code = "LABEL_OUT_OF_RANGE";
  f.severity = Severity::kCritical;
  f.step = f.last_step = step;
  f.location = "input";
  f.summary = "labels of the batch at step " + std::to_string(step) + " range over [" +
              std::to_string(static_cast<long long>(lo)) + ", " + std::to_string(static_cast<long long>(hi)) +
              "], outside the " +
              (facts.num_classes > 0 ? std::to_string(facts.num_classes) + " classes [0, " +
                                           std::to_string(facts.num_classes - 1) + "]"
                                     : std::string("valid range (>= 0)")) +
              (why.empty() ? "" : "; " + why);
  json ev = {{"label_min", Num(lo)}, {"label_max", Num(hi)}, {"num_classes", facts.num_classes}};
  if (!why.empty()) ev["used_out_of_range"] = why;
  if (!std::isnan(facts.label_ignore_value)) {
    ev["ignore_value"] = Num(facts.label_ignore_value);
    ev["ignore_value_why"] = "label " + FormatNumber(facts.label_ignore_value, 6) +
                             " is trained on with a finite loss: the loss ignores it (ignore_index), it is no class";
  }
  f.evidence_json = ev.dump();
  f.causes = {{"label_out_of_range", 0.9}};
  ctx.Report(std::move(f));
}

namespace {

// What went non-finite at one step, by kind of tensor.
struct NonFiniteTensors {
  std::vector<std::string> inputs, acts, grads, weights, buffers;
  std::vector<std::pair<std::string, const TensorStats*>> all_acts;  // every activation, in forward order
};

NonFiniteTensors CollectNonFinite(const StepFrame& frame) {
  NonFiniteTensors bad;
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (tags::kAct.Holds(tag, &rest)) {
      bad.all_acts.emplace_back(std::string(rest), &s);
      if (NonFinite(s)) bad.acts.emplace_back(rest);
    } else if (tags::kInput.Holds(tag, &rest)) {
      if (NonFinite(s)) bad.inputs.emplace_back(rest);
    } else if (tags::kGrad.Holds(tag, &rest)) {
      if (NonFinite(s)) bad.grads.emplace_back(rest);
    } else if (tags::kWeight.Holds(tag, &rest)) {
      if (NonFinite(s)) {
        if (Contains(std::string(rest), {"running_mean", "running_var"})) bad.buffers.emplace_back(rest);
        else bad.weights.emplace_back(rest);
      }
    }
  }
  return bad;
}

// Where the first non-finite value came from: the earliest stage of the step that has one
// (input, forward, loss, backward, optimizer).
struct Producer {
  std::string code, location, phase, kind;
  std::string module;  // module whose output or gradient went bad first (for cause keywords)
};

Producer FirstProducer(const NonFiniteTensors& bad, bool loss_nonfinite, bool grad_norm_bad, const RunFacts& facts) {
  Producer p;
  if (!bad.inputs.empty()) {
    p = {"NONFINITE_INPUT", "input", "data", "input", ""};
  } else if (!bad.acts.empty()) {
    // Earliest in forward order; a container whose child went bad is not the producer.
    std::vector<std::string> candidates;
    for (const auto& m : bad.acts) {
      const bool has_bad_child =
          std::any_of(bad.acts.begin(), bad.acts.end(), [&](const std::string& o) { return IsAncestor(m, o); });
      if (!has_bad_child && !m.empty()) candidates.push_back(m);
    }
    if (candidates.empty()) candidates = bad.acts;
    if (facts.module_order_explicit) {
      std::stable_sort(candidates.begin(), candidates.end(), [&](const std::string& a, const std::string& b) {
        int ia = facts.ModuleIndex(a), ib = facts.ModuleIndex(b);
        if (ia < 0) ia = 1 << 30;
        if (ib < 0) ib = 1 << 30;
        return ia < ib;
      });
    }
    p = {"NONFINITE_ACTIVATION", candidates.front(), "forward", "activation", candidates.front()};
  } else if (loss_nonfinite) {
    p = {"NONFINITE_LOSS", "loss", "forward", "loss", ""};
  } else if (!bad.grads.empty()) {
    // Backward runs from the loss toward the input: the first gradient to go bad is the
    // one latest in forward order.
    std::string best = bad.grads.front();
    int best_index = facts.ParamIndex(best);
    for (const auto& g : bad.grads) {
      const int i = facts.ParamIndex(g);
      if (i > best_index) {
        best = g;
        best_index = i;
      }
    }
    p = {"NONFINITE_GRAD", best, "backward", "gradient", RunFacts::ModuleOfParam(best)};
  } else if (grad_norm_bad) {
    const std::string& norm = facts.roles.Get(Role::kGradNorm);
    p = {"NONFINITE_GRAD", norm.empty() ? tags::kGradGlobalNorm : norm, "backward", "gradient", ""};
  } else {
    const std::string location = !bad.buffers.empty() ? bad.buffers.front() : bad.weights.front();
    p = {"NONFINITE_WEIGHT", location, "optimizer", "weight", RunFacts::ModuleOfParam(location)};
  }
  return p;
}

// The producer's name or type says which operation it was. In the backward pass the
// operation that made the infinite derivative sits after the parameter's module: the next
// module in forward order is named too.
void OperationNameCauses(const Producer& p, const RunFacts& facts, std::vector<Cause>* causes, json* evidence) {
  std::string what = Lower(p.module + " " + facts.ModuleType(p.module));
  if (p.phase == "backward") {
    const int i = facts.ModuleIndex(p.module);
    if (i >= 0 && i + 1 < static_cast<int>(facts.module_order.size())) {
      const std::string& next = facts.module_order[static_cast<size_t>(i) + 1];
      what += " " + Lower(next + " " + facts.ModuleType(next));
      (*evidence)["next_module"] = next;
    }
  }
  if (!what.empty() && what != " ") {
    if (HasWord(what, {"sqrt", "rsqrt", "std", "norm2", "distance", "dist"}))
      RaiseCause(causes, "sqrt_at_zero", p.phase == "backward" ? 0.75 : 0.6);
    if (HasWord(what, {"log", "logsoftmax", "logsigmoid", "entropy"})) RaiseCause(causes, "log_of_zero", 0.7);
    if (HasWord(what, {"exp", "softmax", "softplus", "logsumexp"})) RaiseCause(causes, "exp_overflow", 0.7);
    if (HasWord(what, {"div", "divide", "recip", "reciprocal", "normalize"}))
      RaiseCause(causes, "division_by_zero", 0.6);
    if (HasWord(what, {"half", "fp", "float", "cast", "tohalf"})) RaiseCause(causes, "precision_overflow", 0.6);
    if (HasWord(what, {"batchnorm", "bn"})) RaiseCause(causes, "batchnorm_stats", 0.4);
    (*evidence)["producer_type"] = facts.ModuleType(p.module);
  }
}

// Precision overflow and the forward's functional ops, for a non-finite activation;
// `prev_abs_max` the largest finite |activation| per module at the step before.
void ActivationCauses(const Producer& p, const NonFiniteTensors& bad, const RunFacts& facts,
                      const NonFiniteOptions& options_, const std::unordered_map<std::string, double>& prev_abs_max_,
                      std::vector<Cause>* causes, json* evidence) {
  // An Inf (not a NaN) produced right after a finite value past the float16 range, in the
  // producer or the module before it.
  const TensorStats* ps = nullptr;
  for (const auto& [m, s] : bad.all_acts) {
    if (m == p.module) ps = s;
  }
  double upstream_max = 0;
  std::string upstream;
  for (const auto& [m, s] : bad.all_acts) {
    if (m == p.module) break;
    if (std::isfinite(s->abs_max) && s->abs_max > upstream_max) {
      upstream_max = s->abs_max;
      upstream = m;
    }
  }
  auto prev = prev_abs_max_.find(p.module);
  const double prev_max = prev == prev_abs_max_.end() ? 0 : prev->second;
  const bool past_fp16 = (upstream_max > options_.fp16_max && upstream_max < options_.fp32_plausible_max) ||
                         (prev_max > options_.fp16_max * 0.5 && prev_max < options_.fp32_plausible_max);
  if (ps && ps->inf > 0 && past_fp16) {
    RaiseCause(causes, "precision_overflow", 0.75);
    (*evidence)["upstream_abs_max"] = Num(upstream_max);
    (*evidence)["upstream_module"] = upstream;
  }
  if (ps && ps->inf > 0 && ps->nan == 0) RaiseCause(causes, "exp_overflow", 0.15);
  // A producer whose own operation cannot make a NaN from finite numbers (a Linear, a
  // convolution) got its non-finite input from a function called between modules
  // (torch.exp(logvar) in a VAE's reparameterisation): the forward's functional ops are
  // the suspects. exp past float32's range (e^88.7) with an upstream output that large
  // is the strongest.
  const std::string type = Lower(facts.ModuleType(p.module));
  const bool affine = HasWord(type, {"linear", "conv1d", "conv2d", "conv3d", "bilinear", "embedding"}) ||
                      (type.empty() && HasWord(Lower(p.module), {"fc", "linear", "conv", "proj", "dense"}));
  if (affine && !facts.functional_ops.empty()) {
    json suspects = json::array();
    for (const std::string& op : facts.functional_ops) {
      const std::string name = Lower(op);
      if (name == "exp" || name == "exp_" || name == "expm1") {
        RaiseCause(causes, "exp_overflow", upstream_max >= options_.exp_overflow_abs_max ? 0.8 : 0.5);
      } else if (name == "log" || name == "log2" || name == "log10" || name == "log_") {
        RaiseCause(causes, "log_of_zero", 0.5);
      } else if (name == "sqrt" || name == "rsqrt" || name == "pow") {
        RaiseCause(causes, "sqrt_at_zero", 0.4);
      } else if (name == "div" || name == "true_divide" || name == "reciprocal") {
        RaiseCause(causes, "division_by_zero", 0.4);
      } else {
        continue;
      }
      suspects.push_back(op);
    }
    if (!suspects.empty()) (*evidence)["functional_suspects"] = suspects;
  }
}

// The gradient norm's history before the step: climbing globally, or exploding in the
// producer's own weights.
void HistoryCauses(const StepFrame& frame, const DetectorContext& ctx, const Producer& p,
                   const NonFiniteOptions& options_, std::vector<Cause>* causes, json* evidence) {
  const RunFacts& facts = ctx.facts;
  // Gradient norm climbing in the steps before.
  const auto& gn = ctx.flight.grad_norm();
  std::vector<double> before;
  for (const auto& [step, v] : gn) {
    if (step < frame.step && std::isfinite(v)) before.push_back(v);
  }
  if (before.size() >= 4) {
    const double last = before.back();
    std::vector<double> earlier(before.begin(), before.end() - 1);
    const double med = Median(earlier);
    (*evidence)["grad_norm_before"] = Num(last);
    (*evidence)["grad_norm_median_before"] = Num(med);
    if (med > 0 && last > options_.explosion_ratio * med) {
      RaiseCause(causes, "gradient_explosion", 0.6);
      RaiseCause(causes, "lr_too_high", 0.2);
    }
  }
  // The producer's own weights went non-finite: did their gradient explode at the step
  // before? (Their own history: in a run of several models the global norm is another's.)
  if (evidence->contains("nonfinite_producer_weights")) {
    const std::string weight = (*evidence)["nonfinite_producer_weights"][0].get<std::string>();
    std::vector<double> norms;
    for (const auto& [step, v] : ctx.flight.NormHistory(tags::kGrad.Of(weight))) {
      if (step < frame.step && std::isfinite(v)) norms.push_back(v);
    }
    const double last = norms.empty() ? kNaN : norms.back();
    const double med = norms.size() >= 4 ? Median(std::vector<double>(norms.begin(), norms.end() - 1)) : kNaN;
    if (med > 0 && last > options_.explosion_ratio * med) {
      (*evidence)["producer_grad_norm_before"] = Num(last);
      (*evidence)["producer_grad_norm_median_before"] = Num(med);
      // The weights went non-finite in the update of an exploding gradient: the optimizer
      // wrote them (Adam's squared gradient overflows), nobody else did. What made the
      // gradient explode is the root: a log of a saturated probability (a hand-written
      // BCE without an epsilon: d/dp -log p = -1/p) when the output is a saturated
      // sigmoid or softmax.
      for (Cause& c : *causes) {
        if (c.id == "nonfinite_weights") c.confidence = 0.3;
      }
      RaiseCause(causes, "gradient_explosion", 0.75);
      const std::string output = facts.OutputModule(facts.ModelOf(p.module));
      const std::string output_type = Lower(output + " " + facts.ModuleType(output));
      if (HasWord(output_type, {"sigmoid", "softmax"}) && facts.saturated_fraction_max >= 0.5) {
        RaiseCause(causes, "log_of_zero", 0.8);
        (*evidence)["saturated_output"] = output;
      }
    }
  }
}

// Early in the run with a large learning rate for the optimizer.
void LearningRateCauses(const StepFrame& frame, const RunFacts& facts, const NonFiniteOptions& options_,
                        std::vector<Cause>* causes, json* evidence) {
  const bool adam = facts.optimizer.find("adam") != std::string::npos;
  // Adadelta and L-BFGS take lr = 1 by default (a multiplier of their own step), Adagrad 0.01.
  const bool unit_scale = facts.optimizer.find("adadelta") != std::string::npos ||
                          facts.optimizer.find("lbfgs") != std::string::npos;
  const double high = unit_scale ? options_.unit_scale_high_lr : adam ? options_.adam_high_lr : options_.high_lr;
  const int64_t steps_in = frame.step - facts.first_step;
  if (!std::isnan(facts.lr)) {
    (*evidence)["lr"] = Num(facts.lr);
    if (steps_in < options_.early_steps && facts.lr >= high) RaiseCause(causes, "lr_too_high", facts.lr >= 10 * high ? 0.7 : 0.5);
    else if (facts.lr >= 10 * high) RaiseCause(causes, "lr_too_high", 0.4);
  }
  if (steps_in < options_.early_steps) (*evidence)["early"] = true;
}

}  // namespace

namespace {

// What the non-finite tensors of the first step say: non-finite inputs, labels out of the
// classes' range, the producing module's own weights non-finite, a loss non-finite over finite
// logits; each a cause with its evidence.
void TensorCauses(const StepFrame& frame, const RunFacts& facts, const NonFiniteTensors& bad, const Producer& p,
                  const double* loss_value, std::vector<Cause>* causes, json* evidence) {
  const bool loss_nonfinite = loss_value && !std::isfinite(*loss_value);
  if (!bad.inputs.empty()) {
    RaiseCause(causes, "input_nonfinite", 0.9);
    (*evidence)["nonfinite_inputs"] = bad.inputs;
  }
  double lo, hi;
  if (LabelsOutOfRange(frame, facts, &lo, &hi)) {
    RaiseCause(causes, "label_out_of_range", 0.85);
    (*evidence)["label_min"] = Num(lo);
    (*evidence)["label_max"] = Num(hi);
  }
  if (loss_nonfinite) (*evidence)["loss"] = Num(*loss_value);
  if (!bad.acts.empty()) {
    (*evidence)["nonfinite_activations"] = json(std::vector<std::string>(
        bad.acts.begin(), bad.acts.begin() + std::min<size_t>(bad.acts.size(), 12)));
  }
  (*evidence)["nonfinite_gradients"] = bad.grads.size();
  if (!bad.weights.empty()) (*evidence)["nonfinite_weights"] = bad.weights.size();
  // The producing module's own weights are non-finite at this step: its output is NaN
  // because they are (a NaN written into them, a checkpoint that carried one), not
  // because of what it computes.
  if (p.kind == "activation") {
    std::vector<std::string> own;
    for (const auto& w : bad.weights) {
      if (RunFacts::ModuleOfParam(w) == p.module) own.push_back(w);
    }
    if (!own.empty()) {
      RaiseCause(causes, "nonfinite_weights", 0.7);
      (*evidence)["nonfinite_producer_weights"] = own;
    }
  }
  // Loss non-finite while the last activation (the logits) is finite: the loss function
  // itself did it — log of 0 or a division by 0 in a hand-written loss.
  if (loss_nonfinite && !bad.all_acts.empty() && bad.acts.empty()) {
    RaiseCause(causes, "log_of_zero", 0.5);
    RaiseCause(causes, "division_by_zero", 0.3);
    (*evidence)["logits_finite"] = true;
  }
}

}  // namespace

void NonFiniteDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  const NonFiniteTensors bad = CollectNonFinite(frame);
  const std::string& loss_tag = facts.roles.Get(Role::kLoss);
  const double* loss_value = loss_tag.empty() ? nullptr : frame.Scalar(loss_tag);
  const bool loss_nonfinite = loss_value && !std::isfinite(*loss_value);
  const bool grad_norm_bad = !std::isnan(facts.grad_norm) && !std::isfinite(facts.grad_norm);
  const bool grad_norm_nan = facts.grad_norm != facts.grad_norm && !facts.roles.Get(Role::kGradNorm).empty() &&
                             frame.Scalar(facts.roles.Get(Role::kGradNorm)) != nullptr;
  const bool any = !bad.inputs.empty() || !bad.acts.empty() || loss_nonfinite || !bad.grads.empty() ||
                   !bad.weights.empty() || !bad.buffers.empty() || grad_norm_bad || grad_norm_nan;

  // Remember finite activation magnitudes for the next step's precision evidence.
  auto remember = [&] {
    for (const auto& [module, s] : bad.all_acts) prev_abs_max_[module] = std::isfinite(s->abs_max) ? s->abs_max : 0;
  };
  if (!any) {
    remember();
    return;
  }
  if (found_) {
    Finding f;
    f.code = code_;
    f.location = location_;
    f.severity = severity_;
    f.step = f.last_step = frame.step;
    ctx.Report(std::move(f));
    return;
  }
  found_ = true;

  const Producer p = FirstProducer(bad, loss_nonfinite, grad_norm_bad || grad_norm_nan, facts);

  // ---- causes from the evidence ----
  std::vector<Cause> causes;
  json evidence = {{"phase", p.phase}, {"first_producer", p.location}, {"producer_kind", p.kind}};
  TensorCauses(frame, facts, bad, p, loss_value, &causes, &evidence);
  if (loss_nonfinite && bad.acts.empty() && bad.inputs.empty()) OutputCauses(ctx, &causes, &evidence);
  OperationNameCauses(p, facts, &causes, &evidence);
  // Finite forward, non-finite backward: an operation whose derivative is infinite where
  // its value is not (sqrt or a norm at 0, pow with a fractional exponent at 0).
  if (p.phase == "backward" && facts.has_act_stats) {
    RaiseCause(&causes, "sqrt_at_zero", 0.35);
    RaiseCause(&causes, "division_by_zero", 0.2);
  }
  if (!bad.buffers.empty()) {
    RaiseCause(&causes, "batchnorm_stats", 0.7);
    evidence["nonfinite_buffers"] = bad.buffers;
  }
  if (p.kind == "activation") ActivationCauses(p, bad, facts, options_, prev_abs_max_, &causes, &evidence);
  HistoryCauses(frame, ctx, p, options_, &causes, &evidence);
  LearningRateCauses(frame, facts, options_, &causes, &evidence);
  if (causes.empty() && p.phase == "backward") RaiseCause(&causes, "gradient_explosion", 0.2);

  // The flight recorder: the last steps of everything involved.
  std::vector<std::string> focus;
  if (p.kind == "activation") focus.push_back(tags::kAct.Of(p.location));
  if (p.kind == "gradient") focus.push_back(tags::kGrad.Of(p.location));
  if (p.kind == "weight") focus.push_back(tags::kWeight.Of(p.location));
  for (const auto& i : bad.inputs) focus.push_back(tags::kInput.Of(i));
  evidence["flight_recorder"] = ctx.flight.Snapshot(focus, 8);

  Finding f;
  f.code = p.code;
  f.severity = Severity::kCritical;
  f.step = f.last_step = frame.step;
  f.location = p.location;
  std::string where = p.kind == "input"      ? "in the input batch"
                      : p.kind == "loss"     ? "in the loss (its inputs were finite)"
                      : p.kind == "activation" ? "first in the output of " + p.location + " (forward pass)"
                      : p.kind == "gradient" ? "first in the gradient of " + p.location + " (backward pass; forward was finite)"
                                           : "in the weights of " + p.location + " after the optimizer step";
  f.summary = "first non-finite value at step " + std::to_string(frame.step) + ", " + where;
  f.evidence_json = evidence.dump();
  f.causes = std::move(causes);
  code_ = f.code;
  location_ = f.location;
  severity_ = f.severity;
  ctx.Report(std::move(f));
  remember();
}

void NonFiniteDetector::OutputCauses(const DetectorContext& ctx, std::vector<Cause>* causes, json* evidence) const {
  const RunFacts& facts = ctx.facts;
  // The loss went non-finite while every recorded output was finite: the loss computation
  // made it. A loss whose last finite values were falling toward 0 is a log of a
  // probability that reached 1 for the right class and 0 for another (a saturated
  // sigmoid/softmax, then log): log_of_zero.
  const std::string& loss_tag = facts.roles.Get(Role::kLoss);
  if (!loss_tag.empty()) {
    std::vector<double> finite;
    for (const auto& [step, v] : ctx.flight.ScalarHistory(loss_tag)) {
      if (std::isfinite(v)) finite.push_back(v);
    }
    if (finite.size() >= 4) {
      const size_t n = finite.size();
      const double recent = finite[n - 1], earlier = finite[n / 2 > 0 ? n / 2 - 1 : 0], first = finite.front();
      if (recent < earlier && recent < first && recent < 0.5 * std::max(first, 1e-12)) {
        RaiseCause(causes, "log_of_zero", 0.6);
        (*evidence)["loss_falling_toward_zero"] = json::array({Num(first), Num(earlier), Num(recent)});
      }
    }
  }
  // The model's output: the last module in forward order that has recorded statistics.
  for (auto it = facts.module_order.rbegin(); it != facts.module_order.rend(); ++it) {
    std::vector<std::pair<int64_t, double>> history;
    for (const auto& [step, v] : ctx.flight.AbsMaxHistory(tags::kAct.Of(*it))) {
      if (std::isfinite(v)) history.emplace_back(step, v);
    }
    if (history.empty()) continue;
    const double first = history.front().second, last = history.back().second;
    (*evidence)["output_module"] = *it;
    (*evidence)["output_abs_max"] = json::array();
    for (size_t i = history.size() > 8 ? history.size() - 8 : 0; i < history.size(); ++i) {
      (*evidence)["output_abs_max"].push_back({history[i].first, Num(history[i].second)});
    }
    if (last >= options_.saturation_abs_max && last >= 2 * first) {
      if (last >= options_.exp_overflow_abs_max) {
        RaiseCause(causes, "log_of_zero", 0.4);
        RaiseCause(causes, "exp_overflow", 0.5);
      } else {
        // The outputs climbed until the probabilities reached 0 and 1: the saturation is
        // the mechanism, the log of the 0 is what made the NaN (the outputs are finite).
        RaiseCause(causes, "log_of_zero", 0.7);
        RaiseCause(causes, "saturating_activation", 0.35);
      }
      (*evidence)["output_climbing"] = true;
    }
    return;
  }
}

}  // namespace trainscope::doctor
