#include "doctor/doctor.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <unordered_set>

#include "core/tag.h"
#include "doctor/facts.h"
#include "doctor/knowledge.h"
#include "doctor/param_roles.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

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

// Tags that only reinforcement-learning runs log: returns, episodes, rollouts, exploration,
// advantages, actor/critic losses.
bool IsReinforcementLearningTag(std::string_view tag) {
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

}  // namespace

// ---- RunFacts ----

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

std::string RunFacts::ModelLabel(const std::string& name) const {
  if (!name.empty()) return name;
  if (models.size() >= 2) {
    for (const Model& m : models) {
      if (m.name.empty() && !m.cls.empty()) return m.cls;
    }
  }
  return "model";
}

void RaiseCause(std::vector<Cause>* causes, const std::string& id, double confidence) {
  for (Cause& c : *causes) {
    if (c.id == id) {
      c.confidence = 1 - (1 - c.confidence) * (1 - confidence);
      return;
    }
  }
  causes->push_back({id, confidence});
}

void RankCauses(std::vector<Cause>* causes) {
  causes->erase(std::remove_if(causes->begin(), causes->end(), [](const Cause& c) { return c.confidence < 0.05; }),
                causes->end());
  for (Cause& c : *causes) c.confidence = std::round(std::min(c.confidence, 0.95) * 100) / 100;
  std::stable_sort(causes->begin(), causes->end(),
                   [](const Cause& a, const Cause& b) { return a.confidence > b.confidence; });
}

// ---- Doctor ----

Doctor::Doctor(DoctorOptions options)
    : options_(std::move(options)), flight_(options_.flight_recorder_steps), lag_(options_.lag_steps) {
  std::vector<std::unique_ptr<Detector>> all = MakeDetectors(options_);
  for (auto& d : all) {
    specs_.push_back(d->spec());  // not_checked speaks for every detector, run or not
    if (options_.only.empty() || options_.only.count(d->name())) detectors_.push_back(std::move(d));
  }
}

Doctor::~Doctor() = default;

std::vector<std::string> Doctor::detector_names() const {
  std::vector<std::string> names;
  for (const auto& d : detectors_) names.push_back(d->name());
  return names;
}

std::string_view Doctor::Intern(std::string_view tag) {
  auto it = tag_names_.find(tag);
  if (it == tag_names_.end()) it = tag_names_.emplace(tag).first;
  return *it;
}

StepFrame& Doctor::FrameFor(int64_t step, double wall_time, bool* accepted) {
  static thread_local StepFrame discard;
  *accepted = !finished_ && step > judged_through_;
  if (!*accepted) {
    ++late_samples_;
    if (!finished_ && !open_.empty()) {
      const int64_t needed = open_.rbegin()->first - step + 1;
      lag_ = std::max(lag_, std::min(needed, options_.max_lag_steps));
    }
    discard = StepFrame();
    return discard;
  }
  auto [it, added] = open_.try_emplace(step);
  if (added) it->second.step = step;
  it->second.wall_time = std::max(it->second.wall_time, wall_time);
  return it->second;
}

void Doctor::OnScalar(std::string_view tag, int64_t step, double wall_time, double value) {
  bool ok;
  StepFrame& f = FrameFor(step, wall_time, &ok);
  if (!ok) return;
  f.scalars.emplace_back(Intern(tag), value);
  JudgeReadyFrames();
}

void Doctor::OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) {
  bool ok;
  StepFrame& f = FrameFor(step, wall_time, &ok);
  if (!ok) return;
  f.stats.emplace_back(std::string(tag), stats);
  JudgeReadyFrames();
}

void Doctor::OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) {
  bool ok;
  StepFrame& f = FrameFor(step, wall_time, &ok);
  if (!ok) return;
  f.vectors.emplace_back(std::string(tag), values);
  JudgeReadyFrames();
}

void Doctor::OnSpan(const Span& span) {
  bool ok;
  StepFrame& f = FrameFor(span.step, span.start + span.duration, &ok);
  if (!ok) return;
  f.spans.push_back(span);
  JudgeReadyFrames();
}

void Doctor::OnFinding(const Finding& finding) { recorded_.push_back(finding); }

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

void Doctor::EndBatch() { JudgeReadyFrames(/*batch_end=*/true); }

void Doctor::JudgeReadyFrames(bool batch_end) {
  if (!options_.streaming || open_.empty() || finished_) return;
  if (options_.judge_at_batch_end && !batch_end) return;
  const int64_t newest = open_.rbegin()->first;
  while (!open_.empty() && open_.begin()->first < newest - lag_) {
    StepFrame frame = std::move(open_.begin()->second);
    open_.erase(open_.begin());
    Judge(frame);
  }
}

void Doctor::UpdateFacts(const StepFrame& frame) {
  RunFacts& f = facts_;
  if (f.steps_seen == 0) f.first_step = frame.step;
  for (const auto& [tag, value] : frame.scalars) {
    // What a tag says about the run is read the first time it is judged: interned, one
    // address per tag.
    if (!judged_tags_.insert(tag.data()).second) continue;
    seen_scalars_.emplace(tag);
    f.roles.See(tag);
    if (f.rl_tag.empty() && IsReinforcementLearningTag(tag)) f.rl_tag = tag;
    if (HasPrefix(tag, "train/") && tag.size() >= 11 && tag.compare(tag.size() - 11, 11, "grad_zeroed") == 0) {
      f.has_grad_zeroed = true;  // train/grad_zeroed, or train/<model>/grad_zeroed
    }
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

  // Derived numbers for this step.
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
  // Evidence for the differential diagnosis (facts.cc).
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
    if (std::isnan(f.loss_first)) f.loss_first = *loss;
    else if (*loss != f.loss_first) f.loss_varies = true;
  }
  const std::string& acc_tag = f.roles.Get(Role::kAcc);
  if (const double* acc = acc_tag.empty() ? nullptr : frame.Scalar(acc_tag)) f.acc_latest = *acc;
  if (const double* lo = frame.Scalar(tags::kInputLabelMin)) {
    if (*lo < 0 && std::isnan(f.label_ignore_value) && loss && std::isfinite(*loss)) f.label_ignore_value = *lo;
  }
  UpdateClipping(f.grad_norm);
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

void Doctor::Judge(const StepFrame& frame) {
  judging_step_ = frame.step;
  judged_through_ = std::max(judged_through_, frame.step);
  UpdateFacts(frame);
  flight_.Add(frame);
  if (!std::isnan(facts_.grad_norm)) flight_.AddGradNorm(frame.step, facts_.grad_norm);
  DetectorContext ctx(options_, facts_, flight_, this, &Doctor::ReportThunk);
  for (auto& d : detectors_) {
    if (d->judges_loss_progress() && LossIsNotProgress()) continue;
    d->OnStep(frame, ctx);
  }
  ++facts_.steps_seen;
}

void Doctor::ReportThunk(void* self, Finding finding, bool amend) {
  static_cast<Doctor*>(self)->Report(std::move(finding), amend);
}

void Doctor::Report(Finding finding, bool amend) {
  RankCauses(&finding.causes);
  const auto key = std::make_pair(finding.code, finding.location);
  auto it = open_findings_.find(key);
  if (it != open_findings_.end()) {
    Finding& open = findings_[it->second];
    open.last_step = std::max(open.last_step, std::max(finding.last_step, finding.step));
    if (amend) {
      json old_evidence = json::parse(open.evidence_json, nullptr, false);
      json evidence = json::parse(finding.evidence_json, nullptr, false);
      if (!evidence.is_object()) evidence = json::object();
      if (old_evidence.is_object() && old_evidence.contains("detected_at")) evidence["detected_at"] = old_evidence["detected_at"];
      open.evidence_json = evidence.dump();
      open.summary = finding.summary;
      open.causes = finding.causes;
      open.severity = std::max(open.severity, finding.severity);
      ApplyDifferential(&open, facts_, KnowledgeBase::Builtin());
      open.actions = finding.actions.empty() ? KnowledgeBase::Builtin().ActionsFor(open) : finding.actions;
      FitActionsToFacts(&open, facts_);
      return;
    }
    if (finding.severity > open.severity) {
      open.severity = finding.severity;
      open.summary = finding.summary;
    }
    return;
  }
  if (IsConsequence(finding)) return;
  if (finding.last_step < finding.step) finding.last_step = finding.step;
  // When the doctor knew (the step being judged), next to when the problem began (step):
  // the difference is the detection delay.
  json evidence = json::parse(finding.evidence_json, nullptr, false);
  if (!evidence.is_object()) evidence = json::object();
  // A detector that judged with hindsight (offline, at the end) says when the data first
  // showed it; otherwise it is now.
  if (!evidence.contains("detected_at")) evidence["detected_at"] = judging_step_;
  finding.evidence_json = evidence.dump();
  ApplyDifferential(&finding, facts_, KnowledgeBase::Builtin());
  if (finding.actions.empty()) finding.actions = KnowledgeBase::Builtin().ActionsFor(finding);
  FitActionsToFacts(&finding, facts_);
  open_findings_[key] = findings_.size();
  const bool weights_gone = HasPrefix(finding.code, "NONFINITE_") && finding.severity == Severity::kCritical;
  const bool blown_up = finding.code == "LOSS_DIVERGENCE" && evidence.value("early_blowup", false);
  if (root_ == static_cast<size_t>(-1) && (weights_gone || blown_up)) root_ = findings_.size();
  findings_.push_back(finding);
  if (options_.on_finding) options_.on_finding(findings_.back());
}

namespace {

// What follows when the weights are non-finite or were blown up by the first updates (the
// loss stays at one level, gradients vanish, units die, the accuracy stalls at one class;
// after a blow-up, later updates round away in the huge weights): knowledge.json's
// "consequence_of".
bool IsConsequenceCode(const std::string& code, bool blown_up) {
  const CodeInfo* info = KnowledgeBase::Builtin().Code(code);
  if (info == nullptr) return false;
  return info->consequence_of == "broken_weights" || (blown_up && info->consequence_of == "early_blowup");
}

// Script already clips: the clip is named in the finding's evidence (the advice to clip is
// dropped by FitActionsToFacts).
void NoteClipping(Finding* finding, double clip_norm) {
  if (clip_norm <= 0) return;
  json evidence = json::parse(finding->evidence_json, nullptr, false);
  if (!evidence.is_object()) return;
  evidence["gradient_clipping"] = Num(clip_norm);
  finding->evidence_json = evidence.dump();
}

}  // namespace

bool Doctor::IsConsequence(const Finding& finding) {
  if (root_ == static_cast<size_t>(-1)) return false;
  Finding& root = findings_[root_];
  const bool blown_up = root.code == "LOSS_DIVERGENCE";
  if (!IsConsequenceCode(finding.code, blown_up)) return false;
  // Non-finite weights: only while the loss is still non-finite (a run that recovered,
  // say after a skipped step, is judged again).
  if (!blown_up && !facts_.loss_nonfinite && facts_.roles.Has(Role::kLoss)) return false;
  json evidence = json::parse(root.evidence_json, nullptr, false);
  if (!evidence.is_object()) return true;
  json& list = evidence["consequences"];
  if (!list.is_array()) list = json::array();
  for (const json& c : list) {
    if (c.value("code", "") == finding.code && c.value("location", "") == finding.location) return true;
  }
  if (list.size() < 20) list.push_back({{"code", finding.code}, {"location", finding.location}, {"step", finding.step}});
  root.evidence_json = evidence.dump();
  return true;
}

namespace {

// The median of the last tenth (at least 5) of a series' finite points; NaN without any.
double EndLevel(std::vector<double> values) {
  if (values.empty()) return kNaN;
  const size_t n = std::min(values.size(), std::max<size_t>(5, values.size() / 10));
  std::vector<double> tail(values.end() - static_cast<std::ptrdiff_t>(n), values.end());
  std::nth_element(tail.begin(), tail.begin() + static_cast<std::ptrdiff_t>(n / 2), tail.end());
  return tail[n / 2];
}

}  // namespace

void Doctor::PrepareOffline(const std::vector<ScalarStart>& scalars, const SeriesPoints& points_of) {
  // The tags in the order a step-by-step reading first meets them: by their first step,
  // then in series order (as Finish's reading of the held steps would).
  std::vector<ScalarStart> firsts = scalars;
  std::stable_sort(firsts.begin(), firsts.end(), [](const auto& a, const auto& b) { return a.first_step < b.first_step; });
  RoleResolver roles = facts_.roles;
  for (const ScalarStart& series : firsts) {
    if (facts_.rl_tag.empty() && IsReinforcementLearningTag(series.tag)) facts_.rl_tag = series.tag;
    roles.See(series.tag);
  }
  // The loss at each step: its last value logged at that step (StepFrame::Scalar).
  std::vector<double> loss;
  const std::string& loss_tag = roles.Get(Role::kLoss);
  if (!loss_tag.empty()) {
    std::vector<int64_t> steps;
    std::vector<double> values;
    points_of(loss_tag, &steps, &values);
    std::map<int64_t, double> last_at_step;
    for (size_t i = 0; i < steps.size() && i < values.size(); ++i) last_at_step[steps[i]] = values[i];
    for (const auto& [step, value] : last_at_step) {
      if (std::isfinite(value)) loss.push_back(value);
    }
  }
  facts_.loss_end_level = EndLevel(std::move(loss));
  prepared_ = true;
}

void Doctor::JudgeThrough(int64_t step) {
  while (!open_.empty() && open_.begin()->first <= step) {
    StepFrame frame = std::move(open_.begin()->second);
    open_.erase(open_.begin());
    Judge(frame);
  }
}

void Doctor::Finish() {
  if (finished_) return;
  if (!options_.streaming && !prepared_) {
    // Offline the whole run is known: whether it is reinforcement learning is decided before
    // its first step is judged (its return may be logged later than its loss).
    // Each tag is looked at once: matching a tag against the role patterns costs far more
    // than a set lookup, and a run has few tags and many points.
    RoleResolver roles = facts_.roles;
    std::unordered_set<std::string_view> seen;
    for (const auto& [step, frame] : open_) {
      for (const auto& [tag, value] : frame.scalars) {
        if (!seen.insert(tag).second) continue;
        if (facts_.rl_tag.empty() && IsReinforcementLearningTag(tag)) facts_.rl_tag = tag;
        roles.See(tag);
      }
    }
    std::vector<double> loss;
    const std::string& loss_tag = roles.Get(Role::kLoss);
    for (const auto& [step, frame] : open_) {
      const double* v = loss_tag.empty() ? nullptr : frame.Scalar(loss_tag);
      if (v && std::isfinite(*v)) loss.push_back(*v);
    }
    facts_.loss_end_level = EndLevel(std::move(loss));
  }
  while (!open_.empty()) {
    StepFrame frame = std::move(open_.begin()->second);
    open_.erase(open_.begin());
    Judge(frame);
  }
  DetectorContext ctx(options_, facts_, flight_, this, &Doctor::ReportThunk);
  for (auto& d : detectors_) {
    if (d->judges_loss_progress() && LossIsNotProgress()) continue;
    d->Finish(ctx);
  }
  finished_ = true;
}

namespace {

int64_t DetectedAt(const Finding& f) {
  const json evidence = json::parse(f.evidence_json, nullptr, false);
  if (evidence.is_object() && evidence.contains("detected_at") && evidence["detected_at"].is_number_integer()) {
    return evidence["detected_at"].get<int64_t>();
  }
  return f.step;
}

// Whether finding a's code explains b's (knowledge.json "explains"), or a is the same
// kind of root the doctor suppresses consequences for.
bool Explains(const Finding& a, const Finding& b) {
  if (a.code == b.code) return false;
  const CodeInfo* info = KnowledgeBase::Builtin().Code(a.code);
  return info && std::find(info->explains.begin(), info->explains.end(), b.code) != info->explains.end();
}

}  // namespace

void SortFindings(std::vector<Finding>* findings) {
  // Worst first, then the earliest; ties are broken by evidence, never by name: the
  // finding whose code explains the other's, then the one the data showed first, then the
  // one with the more confident first cause.
  std::vector<int64_t> detected(findings->size());
  std::vector<size_t> order(findings->size());
  for (size_t i = 0; i < findings->size(); ++i) {
    detected[i] = DetectedAt((*findings)[i]);
    order[i] = i;
  }
  auto top = [](const Finding& f) { return f.causes.empty() ? 0.0 : f.causes.front().confidence; };
  std::stable_sort(order.begin(), order.end(), [&](size_t i, size_t j) {
    const Finding& a = (*findings)[i];
    const Finding& b = (*findings)[j];
    if (a.severity != b.severity) return a.severity > b.severity;
    if (a.step != b.step) return a.step < b.step;
    const bool ab = Explains(a, b), ba = Explains(b, a);
    if (ab != ba) return ab;
    if (detected[i] != detected[j]) return detected[i] < detected[j];
    return top(a) > top(b);
  });
  std::vector<Finding> sorted;
  for (size_t i : order) sorted.push_back(std::move((*findings)[i]));
  // A consequence never outranks its root: a root found after (or less severe than) what it
  // explains moves up to just before the first finding it explains.
  for (size_t pass = 0; pass < sorted.size(); ++pass) {
    bool moved = false;
    for (size_t r = 0; r < sorted.size() && !moved; ++r) {
      for (size_t c = 0; c < r; ++c) {
        if (Explains(sorted[r], sorted[c]) && !Explains(sorted[c], sorted[r])) {
          Finding root = std::move(sorted[r]);
          sorted.erase(sorted.begin() + static_cast<std::ptrdiff_t>(r));
          sorted.insert(sorted.begin() + static_cast<std::ptrdiff_t>(c), std::move(root));
          moved = true;
          break;
        }
      }
    }
    if (!moved) break;
  }
  *findings = std::move(sorted);
}

namespace {

std::string WithoutLocation(std::string text, const std::string& location) {
  if (location.empty()) return text;
  for (size_t at = text.find(location); at != std::string::npos; at = text.find(location, at + 1)) {
    text.replace(at, location.size(), "\x01");
  }
  return text;
}

json EvidenceWithoutLocation(const json& value, const std::string& location) {
  if (value.is_string()) return WithoutLocation(value.get<std::string>(), location);
  if (value.is_array() || value.is_object()) {
    json out = value;
    for (auto& item : out) item = EvidenceWithoutLocation(item, location);
    return out;
  }
  return value;
}

std::string GroupKey(const Finding& f) {
  std::string key = f.code + '\x02' + SeverityName(f.severity) + '\x02' + std::to_string(f.step) + '\x02' +
                    std::to_string(f.last_step) + '\x02' + WithoutLocation(f.summary, f.location) + '\x02';
  for (const Cause& c : f.causes) key += c.id + '=' + FormatNumber(c.confidence, 6) + ';';
  key += '\x02';
  for (const std::string& a : f.actions) key += WithoutLocation(a, f.location) + '\x03';
  const json evidence = json::parse(f.evidence_json, nullptr, false);
  key += '\x02' + (evidence.is_discarded() ? f.evidence_json : EvidenceWithoutLocation(evidence, f.location).dump());
  return key;
}

}  // namespace

void GroupFindings(std::vector<Finding>* findings) {
  std::map<std::string, size_t> first;             // group key -> index in `out`
  std::vector<std::vector<std::string>> places;    // per kept finding: its locations
  std::vector<Finding> out;
  for (Finding& f : *findings) {
    const std::string key = GroupKey(f);
    auto [it, added] = first.try_emplace(key, out.size());
    if (added) {
      places.push_back({f.location});
      out.push_back(std::move(f));
      continue;
    }
    auto& where = places[it->second];
    if (std::find(where.begin(), where.end(), f.location) == where.end()) where.push_back(f.location);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    json evidence = json::parse(out[i].evidence_json, nullptr, false);
    if (!evidence.is_object()) continue;
    if (places[i].size() < 2) continue;  // a repeat of the same place: one finding, no list
    evidence["locations"] = places[i];
    evidence["count"] = places[i].size();
    out[i].evidence_json = evidence.dump();
    out[i].summary += " (and " + std::to_string(places[i].size() - 1) + " more places like it: evidence.locations)";
  }
  *findings = std::move(out);
}

namespace {

// The consistency pass: one series does not get findings that contradict each other. A
// loss cannot be stuck (LOSS_PLATEAU) and climbing (LOSS_DIVERGENCE) over the same run:
// the more severe finding stays, on a tie the divergence (a climb out of a flat start is a
// divergence). A validation loss at chance level is not over-fitting: the plateau stays.
// What was dropped is kept in the survivor's evidence ("contradicted": code, summary).
void ResolveContradictions(std::vector<Finding>* findings) {
  struct Rule {
    const char* a;
    const char* b;
    const char* keep_on_tie;
  };
  static const Rule kRules[] = {{"LOSS_PLATEAU", "LOSS_DIVERGENCE", "LOSS_DIVERGENCE"},
                                {"LOSS_PLATEAU", "OVERFITTING", "LOSS_PLATEAU"}};
  std::vector<bool> drop(findings->size(), false);
  for (const Rule& rule : kRules) {
    for (size_t i = 0; i < findings->size(); ++i) {
      Finding& x = (*findings)[i];
      if (drop[i] || x.code != rule.a) continue;
      for (size_t j = 0; j < findings->size(); ++j) {
        Finding& y = (*findings)[j];
        if (drop[j] || y.code != rule.b || y.location != x.location) continue;
        const bool keep_x = x.severity != y.severity ? x.severity > y.severity : x.code == rule.keep_on_tie;
        Finding& kept = keep_x ? x : y;
        const Finding& gone = keep_x ? y : x;
        json evidence = json::parse(kept.evidence_json, nullptr, false);
        if (!evidence.is_object()) evidence = json::object();
        if (!evidence.contains("contradicted")) evidence["contradicted"] = json::array();
        evidence["contradicted"].push_back({{"code", gone.code}, {"step", gone.step}, {"summary", gone.summary}});
        kept.evidence_json = evidence.dump();
        drop[keep_x ? j : i] = true;
        if (!keep_x) break;
      }
    }
  }
  std::vector<Finding> out;
  for (size_t i = 0; i < findings->size(); ++i) {
    if (!drop[i]) out.push_back(std::move((*findings)[i]));
  }
  *findings = std::move(out);
}

}  // namespace

std::vector<Finding> Doctor::findings() const {
  std::vector<Finding> out = findings_;
  ResolveContradictions(&out);
  for (Finding& f : out) {
    // With the run's final facts: what was advised early may be contradicted since.
    FitActionsToFacts(&f, facts_);
    NoteClipping(&f, facts_.clip_norm);
  }
  for (const Finding& r : recorded_) {
    const bool dup = std::any_of(out.begin(), out.end(), [&](const Finding& f) {
      return f.code == r.code && f.location == r.location;
    });
    if (!dup) out.push_back(r);
  }
  GroupFindings(&out);
  SortFindings(&out);
  return out;
}

std::vector<NotChecked> Doctor::not_checked() const {
  // Per input the run lacks: the codes of every registered detector that need it, in
  // registry order (those marked listed_last after the others).
  const InputView view{facts_, seen_scalars_};
  std::vector<NotChecked> out;
  for (const InputInfo& input : Inputs()) {
    if (!input.missing(view)) continue;
    std::vector<std::string> codes;
    for (bool last : {false, true}) {
      for (const DetectorSpec& spec : specs_) {
        for (const Need& need : spec.needs) {
          if (need.input != input.input || need.listed_last != last) continue;
          for (const std::string& code : need.codes.empty() ? spec.codes : need.codes) {
            if (std::find(codes.begin(), codes.end(), code) == codes.end()) codes.push_back(code);
          }
        }
      }
    }
    if (codes.empty()) continue;  // no detector needs it
    out.push_back({input.check, std::move(codes), input.reason(view)});
  }
  return out;
}

const Finding* FirstAction(const std::vector<Finding>& findings) {
  if (findings.empty() || findings.front().severity < Severity::kWarning) return nullptr;
  const Severity worst = findings.front().severity;
  const Finding* speed = nullptr;
  for (const Finding& f : findings) {
    if (f.severity != worst) break;
    if (f.actions.empty()) continue;
    const CodeInfo* info = KnowledgeBase::Builtin().Code(f.code);
    if (info == nullptr || !info->speed) return &f;
    if (speed == nullptr) speed = &f;
  }
  return speed;
}

// ---- offline ----

Diagnosis Diagnose(const StepwiseRun& run, const DoctorOptions& options) {
  DoctorOptions opts = options;
  opts.streaming = false;
  Doctor doctor(std::move(opts));
  doctor.PrepareOffline(run.scalars, run.points_of);
  for (const auto& [key, value] : run.meta) doctor.OnMeta(key, value);
  run.replay_steps(&doctor, [&doctor](int64_t step) { doctor.JudgeThrough(step); });
  for (const Finding& f : run.findings) doctor.OnFinding(f);
  doctor.Finish();
  Diagnosis d;
  d.findings = doctor.findings();
  d.not_checked = doctor.not_checked();
  d.steps = doctor.steps_judged();
  return d;
}

Diagnosis Diagnose(const RunData& run, const DoctorOptions& options) {
  StepwiseRun stepwise{run.meta, run.findings, {}, {}, {}};
  for (const ScalarSeries& s : run.scalars) {
    if (!s.steps.empty()) stepwise.scalars.push_back({s.tag, *std::min_element(s.steps.begin(), s.steps.end())});
  }
  stepwise.points_of = [&run](const std::string& tag, std::vector<int64_t>* steps, std::vector<double>* values) {
    if (const ScalarSeries* s = run.FindScalar(tag)) *steps = s->steps, *values = s->values;
  };
  stepwise.replay_steps = [&run](SampleSink* sink, const std::function<void(int64_t)>& step_done) {
    run.ReplaySteps(sink, step_done);
  };
  return Diagnose(stepwise, options);
}

json DiagnosisToJson(const Diagnosis& d, const std::string& source, const std::string& format, int64_t steps) {
  json findings = json::array();
  for (const Finding& f : d.findings) {
    json evidence = json::parse(f.evidence_json, nullptr, false);
    if (!evidence.is_object()) evidence = json::object();
    json causes = json::array();
    for (const Cause& c : f.causes) causes.push_back({{"id", c.id}, {"confidence", c.confidence}});
    findings.push_back({{"code", f.code},         {"severity", SeverityName(f.severity)},
                        {"step", f.step},         {"last_step", f.last_step},
                        {"location", f.location}, {"summary", f.summary},
                        {"evidence", evidence},   {"causes", causes},
                        {"actions", f.actions}});
  }
  json not_checked = json::array();
  for (const NotChecked& n : d.not_checked) {
    not_checked.push_back({{"check", n.check}, {"codes", n.codes}, {"reason", n.reason}});
  }
  return {{"source", source}, {"format", format}, {"steps", steps}, {"findings", findings},
          {"not_checked", not_checked}};
}

}  // namespace trainscope::doctor
