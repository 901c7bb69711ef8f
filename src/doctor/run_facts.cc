// What the doctor knows about a run (RunFacts): its lookups by module and parameter, and how
// the run's meta and each judged step update them (facts read from tags, per-step numbers,
// evidence for the differential diagnosis, whether gradients are clipped).
#include "doctor/doctor.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/tag.h"
#include "doctor/param_roles.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

// train/grad_zeroed, or train/<model>/grad_zeroed.
bool IsGradZeroedTag(std::string_view tag) { return HasPrefix(tag, "train/") && tag.ends_with("grad_zeroed"); }

// An integer from a JSON object under any of `keys` (numbers or numeric strings).
int IntFrom(const json& obj, std::initializer_list<const char*> keys) {
  if (!obj.is_object()) return 0;
  for (const char* k : keys) {
    auto it = obj.find(k);
    if (it == obj.end()) continue;
    if (it->is_number_integer()) return it->get<int>();
    if (it->is_number()) return static_cast<int>(it->get<double>());
    if (it->is_string()) return std::atoi(it->get<std::string>().c_str());
  }
  return 0;
}

}  // namespace

bool Doctor::IsReinforcementLearningTag(std::string_view tag) {
  std::string word;
  const std::string lower = Lower(std::string(tag)) + " ";
  for (char c : lower) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word.push_back(c);
      continue;
    }
    for (const char* marker : {"reward", "rewards", "rew", "rollout", "episode", "episodes", "exploration",
                               "advantage", "advantages", "ppo", "grpo", "actor", "critic"}) {
      if (word == marker) return true;
    }
    word.clear();
  }
  return false;
}

int RunFacts::ModuleIndex(const std::string& module) const {
  for (size_t i = 0; i < module_order.size(); ++i) {
    if (module_order[i] == module) return static_cast<int>(i);
  }
  return -1;
}

std::string RunFacts::ModuleOfParam(const std::string& param) {
  const size_t dot = param.rfind('.');
  return dot == std::string::npos ? "" : param.substr(0, dot);
}

int RunFacts::ParamIndex(const std::string& param) const {
  if (!param_order_explicit && !module_order.empty()) {
    // Forward position of the parameter's module (or of its nearest recorded ancestor),
    // scaled so parameters of one module keep their own order.
    std::string module = ModuleOfParam(param);
    while (true) {
      const int m = ModuleIndex(module);
      if (m >= 0) {
        int within = 0;
        for (size_t i = 0; i < param_order.size(); ++i) {
          if (param_order[i] == param) within = static_cast<int>(i);
        }
        return m * 100000 + within;
      }
      const size_t dot = module.rfind('.');
      if (dot == std::string::npos) break;
      module = module.substr(0, dot);
    }
  }
  for (size_t i = 0; i < param_order.size(); ++i) {
    if (param_order[i] == param) return static_cast<int>(i);
  }
  return -1;
}

std::string RunFacts::ModuleType(const std::string& module) const {
  auto it = module_types.find(module);
  return it == module_types.end() ? "" : it->second;
}

int RunFacts::ParamDims(const std::string& param) const {
  auto it = param_shapes.find(param);
  return it == param_shapes.end() ? -1 : static_cast<int>(it->second.size());
}

std::string RunFacts::ModelOf(std::string_view name) const {
  const size_t slash = name.find('/');
  if (slash == std::string_view::npos) return "";
  const std::string_view head = name.substr(0, slash);
  for (const Model& m : models) {
    if (!m.name.empty() && m.name == head) return m.name;
  }
  return "";
}

std::string RunFacts::OutputModule(const std::string& model) const {
  for (auto it = module_order.rbegin(); it != module_order.rend(); ++it) {
    if (ModelOf(*it) == model) return *it;
  }
  return "";
}

bool RunFacts::IsModelOutput(const std::string& module) const {
  if (!module_order_explicit) return false;  // the order series first appeared in says nothing of the output
  const std::string model = ModelOf(module);
  const auto modules = std::count_if(module_order.begin(), module_order.end(),
                                     [&](const std::string& m) { return ModelOf(m) == model; });
  return modules >= 2 && OutputModule(model) == module;
}

std::string RunFacts::OptimizerOf(const std::string& model) const {
  for (const Model& m : models) {
    if (m.name == model && !m.optimizer.empty()) return Lower(m.optimizer);
  }
  return optimizer;
}

bool RunFacts::AdaptiveStep(const std::string& model) const {
  const std::string name = OptimizerOf(model);
  for (const char* kind : {"adam", "rmsprop", "adagrad", "adadelta", "adafactor", "lion", "lamb"}) {
    if (name.find(kind) != std::string::npos) return true;
  }
  return false;
}

std::string RunFacts::ModelLabel(const std::string& name) const {
  if (!name.empty()) return name;
  if (models.size() >= 2) {
    for (const Model& m : models) {
      if (m.name.empty() && !m.cls.empty()) return m.cls;
    }
  }
  return "model";
}

void Doctor::OnMeta(std::string_view key, std::string_view value) {
  facts_.meta[std::string(key)] = std::string(value);
  if (key == "roles") {
    facts_.roles.SetExplicit(value);
  } else if (key == "num_classes") {
    facts_.num_classes = std::atoi(std::string(value).c_str());
  } else if (key == "batch_size") {
    facts_.batch_size = std::atoi(std::string(value).c_str());
  } else if (key == "accumulation_steps") {
    facts_.accumulation_steps = std::max(1, std::atoi(std::string(value).c_str()));
  } else if (key == "optimizer") {
    facts_.optimizer = Lower(std::string(value));
  } else if (key == "module_order" || key == "param_order") {
    json j = json::parse(value, nullptr, false);
    if (j.is_array()) {
      std::vector<std::string> order;
      for (const json& v : j) {
        if (v.is_string()) order.push_back(v.get<std::string>());
      }
      if (key == "module_order") {
        facts_.module_order = order;
        facts_.module_order_explicit = true;
      } else {
        facts_.param_order = order;
        facts_.param_order_explicit = true;
      }
    }
  } else if (key == "module_types") {
    json j = json::parse(value, nullptr, false);
    if (j.is_object()) {
      for (const auto& [name, type] : j.items()) {
        if (type.is_string()) facts_.module_types[name] = type.get<std::string>();
      }
    }
  } else if (key == "param_shapes") {
    json j = json::parse(value, nullptr, false);
    if (j.is_object()) {
      for (const auto& [name, shape] : j.items()) {
        if (!shape.is_array()) continue;
        std::vector<int64_t> dims;
        for (const json& d : shape) {
          if (d.is_number_integer()) dims.push_back(d.get<int64_t>());
        }
        if (dims.size() == shape.size()) facts_.param_shapes[name] = std::move(dims);
      }
    }
  } else if (key == "models") {
    json j = json::parse(value, nullptr, false);
    facts_.models.clear();
    if (j.is_array()) {
      for (const json& m : j) {
        if (!m.is_object()) continue;
        RunFacts::Model model;
        if (m.contains("name") && m["name"].is_string()) model.name = m["name"].get<std::string>();
        if (m.contains("class") && m["class"].is_string()) model.cls = m["class"].get<std::string>();
        if (m.contains("optimizer") && m["optimizer"].is_string()) model.optimizer = m["optimizer"].get<std::string>();
        facts_.models.push_back(std::move(model));
      }
    }
  } else if (key == "param_dtypes") {
    json j = json::parse(value, nullptr, false);
    if (j.is_object()) {
      for (const auto& [name, dtype] : j.items()) {
        if (dtype.is_string()) facts_.param_dtypes[name] = Lower(dtype.get<std::string>());
      }
    }
  } else if (key == "unoptimized_params" || key == "functional_ops" || key == "params_without_grad") {
    json j = json::parse(value, nullptr, false);
    if (j.is_array()) {
      std::vector<std::string> names;
      for (const json& v : j) {
        if (v.is_string()) names.push_back(v.get<std::string>());
      }
      if (key == "functional_ops") {
        facts_.functional_ops = std::move(names);
      } else if (key == "params_without_grad") {
        facts_.params_without_grad = std::move(names);
      } else {
        facts_.unoptimized_params = std::set<std::string>(names.begin(), names.end());
        facts_.unoptimized_params_known = true;
      }
    }
  } else if (key == "config") {
    json j = json::parse(value, nullptr, false);
    if (facts_.num_classes == 0) facts_.num_classes = IntFrom(j, {"num_classes", "n_classes", "classes", "num_labels"});
    if (facts_.batch_size == 0) {
      facts_.batch_size = IntFrom(j, {"batch_size", "batch", "train_batch_size", "per_device_train_batch_size"});
    }
    const int acc = IntFrom(j, {"accumulation_steps", "gradient_accumulation_steps", "grad_accum"});
    if (acc > 1) facts_.accumulation_steps = acc;
    if (facts_.optimizer.empty() && j.is_object() && j.contains("optimizer") && j["optimizer"].is_string()) {
      facts_.optimizer = Lower(j["optimizer"].get<std::string>());
    }
  }
}

void Doctor::UpdateFacts(const StepFrame& frame) {
  if (facts_.steps_seen == 0) facts_.first_step = frame.step;
  NoteTags(frame);
  UpdateStepNumbers(frame);
  UpdateDifferentialEvidence(frame);
  UpdateClipping(facts_.grad_norm);
}

// What the run records, read from the tags of each judged step.
void Doctor::NoteTags(const StepFrame& frame) {
  RunFacts& f = facts_;
  for (const auto& [tag, value] : frame.scalars) {
    // What a tag says about the run is read the first time it is judged: interned, one
    // address per tag.
    if (!judged_tags_.insert(tag.data()).second) continue;
    seen_scalars_.emplace(tag);
    f.roles.See(tag);
    if (f.rl_tag.empty() && IsReinforcementLearningTag(tag)) f.rl_tag = tag;
    if (IsGradZeroedTag(tag)) f.has_grad_zeroed = true;
    if (tags::kTime.Holds(tag)) f.has_time = true;
    if (tags::kMem.Holds(tag)) f.has_memory = true;
    if (tags::kCensus.Holds(tag)) f.has_census = true;
    if (tag == tags::kInputLabelMin || tag == tags::kInputLabelMax) f.has_labels = true;
  }
  if (!frame.spans.empty()) f.has_time = true;
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (tags::kGrad.Holds(tag, &rest)) {
      f.has_grad_stats = true;
      if (seen_grads_.insert(std::string(rest)).second) grad_order_.emplace_back(rest);
    } else if (tags::kWeight.Holds(tag, &rest)) {
      f.has_weight_stats = true;
      if (seen_weights_.insert(std::string(rest)).second) weight_order_.emplace_back(rest);
    } else if (tags::kUpdate.Holds(tag)) {
      f.has_update_stats = true;
    } else if (tags::kAct.Holds(tag, &rest)) {
      f.has_act_stats = true;
      if (!std::isnan(s.dead_fraction)) f.has_dead = true;
      if (!std::isnan(s.saturated_fraction)) f.has_saturated = true;
      if (seen_acts_.insert(std::string(rest)).second && !f.module_order_explicit) f.module_order.emplace_back(rest);
    } else if (tags::kInput.Holds(tag)) {
      f.has_input_stats = true;
    }
  }
  if (!f.param_order_explicit) {
    // Weights are recorded in named_parameters() order after the optimizer step; gradient
    // hooks fire in backward order, so they are only the fallback.
    const auto& order = weight_order_.empty() ? grad_order_ : weight_order_;
    if (order.size() != f.param_order.size()) {
      f.param_order = order;
      for (const auto& g : grad_order_) {
        if (!seen_weights_.empty() && !seen_weights_.count(g)) f.param_order.push_back(g);
      }
    }
  }
}

// Derived numbers for this step: loss, LR, gradient norm, update ratio.
void Doctor::UpdateStepNumbers(const StepFrame& frame) {
  RunFacts& f = facts_;
  const std::string& loss_tag = f.roles.Get(Role::kLoss);
  const double* loss = loss_tag.empty() ? nullptr : frame.Scalar(loss_tag);
  f.loss = loss ? *loss : kNaN;
  const std::string& lr_tag = f.roles.Get(Role::kLr);
  if (const double* lr = lr_tag.empty() ? nullptr : frame.Scalar(lr_tag)) {
    f.lr = *lr;
    if (std::isfinite(*lr)) f.lr_max = std::max(f.lr_max, *lr);
  }
  const std::string& gn_tag = f.roles.Get(Role::kGradNorm);
  const double* gn = gn_tag.empty() ? nullptr : frame.Scalar(gn_tag);
  double grad_sq = 0, weight_sq = 0, update_sq = 0;
  bool any_grad = false, any_update = false;
  std::map<std::string_view, double> weight_sq_by_param;
  std::map<std::string_view, const TensorStats*> grad_by_param;
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (tags::kGrad.Holds(tag, &rest)) {
      grad_by_param[rest] = &s;
      grad_sq += s.nan + s.inf ? std::numeric_limits<double>::infinity() : s.sum_squares;
      any_grad = true;
    } else if (tags::kWeight.Holds(tag, &rest)) {
      weight_sq_by_param[rest] = s.sum_squares;
    }
  }
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (tags::kUpdate.Holds(tag, &rest)) {
      if (auto g = grad_by_param.find(rest); g != grad_by_param.end()) {
        const double u = s.mean(), gm = g->second->mean();
        if (std::isfinite(u) && std::isfinite(gm) && u != 0 && gm != 0) {
          ++f.update_grad_pairs;
          if ((u > 0) == (gm > 0)) ++f.update_grad_same_sign;
        }
      }
      auto it = weight_sq_by_param.find(rest);
      if (it == weight_sq_by_param.end()) continue;
      update_sq += s.sum_squares;
      weight_sq += it->second;
      any_update = true;
    }
  }
  f.grad_norm = gn ? *gn : any_grad ? std::sqrt(grad_sq) : kNaN;
  f.update_ratio = any_update && weight_sq > 0 ? std::sqrt(update_sq / weight_sq) : kNaN;
  if (loss) {
    f.loss_nonfinite = !std::isfinite(*loss);
    if (!f.loss_nonfinite) f.loss_nonfinite_since = -1;
    else if (f.loss_nonfinite_since < 0) f.loss_nonfinite_since = frame.step;
  }
}

// Evidence for the differential diagnosis (facts.cc).
void Doctor::UpdateDifferentialEvidence(const StepFrame& frame) {
  RunFacts& f = facts_;
  const std::string& loss_tag = f.roles.Get(Role::kLoss);
  const double* loss = loss_tag.empty() ? nullptr : frame.Scalar(loss_tag);
  bool any_grad_stats = false, all_grads_zero = true;
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (tags::kGrad.Holds(tag, &rest)) {
      any_grad_stats = true;
      all_grads_zero &= s.numel > 0 && s.zeros == s.numel;
    } else if (tags::kWeight.Holds(tag, &rest)) {
      const std::string p(rest);
      if (s.finite() >= 2 && first_weight_seen_.insert(p).second && ClassifyParam(p, f) == ParamRole::kWeight) {
        (s.min == s.max ? f.weights_constant_at_start : f.weights_varied_at_start) = true;
      }
    } else if (tags::kAct.Holds(tag, &rest)) {
      if (s.nan + s.inf) f.activations_nonfinite_seen = true;
      if (!std::isnan(s.dead_fraction)) latest_dead_[std::string(rest)] = s.dead_fraction;
      if (!std::isnan(s.saturated_fraction)) latest_saturated_[std::string(rest)] = s.saturated_fraction;
    }
  }
  if (any_grad_stats) {
    f.grads_zero_from_start = (f.grad_steps == 0 || f.grads_zero_from_start) && all_grads_zero;
    ++f.grad_steps;
  }
  auto max_of = [](const std::map<std::string, double>& m) {
    double out = kNaN;
    for (const auto& [k, v] : m) out = std::isnan(out) ? v : std::max(out, v);
    return out;
  };
  f.dead_fraction_max = max_of(latest_dead_);
  f.saturated_fraction_max = max_of(latest_saturated_);
  if (loss && std::isfinite(*loss)) {
    ++f.loss_points;
    if (std::isnan(f.loss_first)) f.loss_first = *loss;
    else if (*loss != f.loss_first) f.loss_varies = true;
  }
  if (f.has_grad_zeroed) {
    for (const auto& [tag, value] : frame.scalars) {
      if (!IsGradZeroedTag(tag) || frame.Scalar(tag) != &value) continue;  // a step's last value decides
      ++f.grad_zeroed_points;
      f.grad_not_zeroed_points += value == 0;
    }
  }
  const std::string& acc_tag = f.roles.Get(Role::kAcc);
  if (const double* acc = acc_tag.empty() ? nullptr : frame.Scalar(acc_tag)) f.acc_latest = *acc;
  if (const double* lo = frame.Scalar(tags::kInputLabelMin)) {
    if (*lo < 0 && std::isnan(f.label_ignore_value) && loss && std::isfinite(*loss)) f.label_ignore_value = *lo;
  }
}

void Doctor::UpdateClipping(double norm) {
  // clip_grad_norm_(max_norm=c) scales the gradients to c * n / (n + 1e-6): the norm the
  // optimizer sees is c to ~1e-6 whenever it clipped. An unclipped norm is a continuous
  // value: it does not hit its own maximum again to 1e-4. So the ceiling is the largest
  // norm seen, and clipping is on when that ceiling is hit again and again.
  if (!std::isfinite(norm) || norm <= 0) return;
  constexpr double kTolerance = 1e-4;
  RunFacts& f = facts_;
  if (norm > norm_ceiling_ * (1 + kTolerance)) {
    norm_ceiling_ = norm;
    ceiling_hits_ = 1;
    f.clip_norm = 0;  // a norm above the ceiling: not clipped (or the clip was raised)
    f.clip_points = 0;
  } else if (norm >= norm_ceiling_ * (1 - kTolerance)) {
    ++ceiling_hits_;
  }
  if (ceiling_hits_ >= kClipMinPoints) {
    f.clip_norm = norm_ceiling_;
    f.clip_points = ceiling_hits_;
  }
}

}  // namespace trainscope::doctor
