#include "doctor/layer_health.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <span>

#include "core/streaming.h"
#include "core/tag.h"
#include "doctor/detector.h"
#include "doctor/step_frame.h"

namespace trainscope::doctor {

namespace {

constexpr size_t kRecent = 5;  // records a part's median is taken over

// "fc1.weight" -> "fc1" (RunFacts::ModuleOfParam); a name without a dot is its own layer.
std::string ModuleOf(std::string_view param) {
  std::string module = RunFacts::ModuleOfParam(std::string(param));
  return module.empty() ? std::string(param) : module;
}

bool NonFinite(const TensorStats& s) { return s.nan + s.inf > 0; }

}  // namespace

struct LayerHealthBuilder::Layer {
  std::string name;
  bool nonfinite = false;
  std::string nonfinite_what;
  double update_ratio = kNaN;
  double update_ratio_numel = 0;  // the parameter it was taken from (the largest)
  double grad_norm = kNaN;
  const Finding* finding = nullptr;  // the worst located here
  bool frozen_model = false;  // of a watched model no optimizer steps (a teacher, a target network)
};

namespace {

// A share that falls by a third per decade that `value` lies below `low` (or above `high`).
double Decades(double value, double low, double high) {
  if (value >= low && value <= high) return 1;
  const double decades = value < low ? std::log10(low / value) : std::log10(value / high);
  return std::clamp(1 - decades / 3, 0.0, 1.0);
}

}  // namespace

// One layer's score: the lowest of its parts (finite values, learning, gradient against the
// layers' median, its worst finding), and why. converged: small updates say nothing against
// it; layers_with_norm: how many layers the median gradient norm is over.
LayerHealth LayerHealthBuilder::Score(const Layer& l, bool converged, double median_norm, size_t layers_with_norm) {
  LayerHealth h;
  h.layer = l.name;
  double lowest = 1;
  auto part = [&](const char* id, double share, const std::string& why) {
    h.parts.emplace_back(id, share);
    if (share < lowest) {
      lowest = share;
      h.worst = why;
    }
  };
  part("finite", l.nonfinite ? 0 : 1, "non-finite values in " + l.nonfinite_what);
  // A model no optimizer steps whose weights stay put is a frozen reference, not a layer that
  // fails to learn (were it meant to learn, PARAM_NOT_UPDATED says so, below).
  const bool frozen = l.frozen_model && l.update_ratio == 0;
  if (!std::isnan(l.update_ratio) && !frozen && !(converged && l.update_ratio > 0 && l.update_ratio < 1e-5)) {
    const double share = l.update_ratio > 0 ? Decades(l.update_ratio, 1e-5, 1e-1) : 0;
    part("learning", share,
         l.update_ratio > 0 ? "update/weight ratio " + FormatNumber(l.update_ratio, 2) + " (healthy ~1e-3)"
                            : "its weights do not move");
  }
  if (std::isfinite(l.grad_norm) && median_norm > 0 && layers_with_norm >= 2) {
    const double relative = l.grad_norm / median_norm;
    part("gradient", relative > 0 ? Decades(relative, 1e-3, INFINITY) : 0,
         "gradient norm " + FormatNumber(relative, 2) + "x the layers' median");
  }
  if (l.finding != nullptr) {
    const double share = l.finding->severity == Severity::kCritical  ? 0.2
                         : l.finding->severity == Severity::kWarning ? 0.5
                                                                     : 0.9;
    part("findings", share, std::string(SeverityName(l.finding->severity)) + " " + l.finding->code + " at step " +
                                std::to_string(l.finding->step));
  }
  h.score = static_cast<int>(std::lround(100 * lowest));
  if (h.score == 100) h.worst.clear();
  return h;
}

void LayerHealthBuilder::OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) {
  Series& s = At(series_, tag);
  s.seen = true;
  s.nonfinite = NonFinite(stats);
  s.l2 = stats.l2_norm();
  s.numel = static_cast<double>(stats.numel);
  std::string_view param;
  if (tags::kWeight.Holds(tag, &param)) {
    At(weight_norm_now_, param) = s.l2;
  } else if (tags::kUpdate.Holds(tag, &param)) {
    updates_now_.push_back({&s, std::string(param), s.l2});
  }
}

void LayerHealthBuilder::EndStep() {
  // Update and weight records of the same step: ||w_t - w_{t-1}|| / ||w_t||.
  for (const auto& [series, param, update_norm] : updates_now_) {
    auto w = weight_norm_now_.find(param);
    if (w == weight_norm_now_.end() || !(w->second > 0) || !std::isfinite(update_norm)) continue;
    series->ratios.push_back(update_norm / w->second);
    if (series->ratios.size() > kRecent) series->ratios.pop_front();
  }
  updates_now_.clear();
  weight_norm_now_.clear();
}

// meta `models` ([{"name", "optimizer", ...}]): the layers of a model watched with no
// optimizer ("optimizer": ""); the first model keeps bare names, the others "<name>/...".
void LayerHealthBuilder::MarkFrozenModels(const std::map<std::string, std::string>& meta,
                                          std::map<std::string, Layer>* layers) {
  auto m = meta.find("models");
  if (m == meta.end()) return;
  const nlohmann::json models = nlohmann::json::parse(m->second, nullptr, false);
  if (!models.is_array()) return;
  std::vector<std::string> named, frozen;
  bool bare_frozen = false;
  for (const auto& model : models) {
    if (!model.is_object()) continue;
    const std::string name = model.value("name", "");
    const bool stepped = model.contains("optimizer") && model["optimizer"].is_string() &&
                         !model["optimizer"].get<std::string>().empty();
    if (!name.empty()) named.push_back(name + "/");
    if (stepped) continue;
    if (name.empty()) {
      bare_frozen = true;
    } else {
      frozen.push_back(name + "/");
    }
  }
  for (auto& [layer_name, layer] : *layers) {
    auto under = [&](const std::string& prefix) { return layer_name.rfind(prefix, 0) == 0; };
    const bool in_named = std::any_of(named.begin(), named.end(), under);
    layer.frozen_model = in_named ? std::any_of(frozen.begin(), frozen.end(), under) : bare_frozen;
  }
}

std::vector<LayerHealth> LayerHealthBuilder::Finish(const std::vector<std::string>& series_order,
                                                    const std::map<std::string, std::string>& meta,
                                                    const std::vector<Finding>& findings) const {
  std::map<std::string, Layer> layers;
  std::vector<std::string> seen_order;
  auto layer = [&](const std::string& name) -> Layer& {
    auto [it, added] = layers.try_emplace(name);
    if (added) {
      it->second.name = name;
      seen_order.push_back(name);
    }
    return it->second;
  };
  for (const std::string& tag : series_order) {
    auto it = series_.find(tag);
    if (it == series_.end() || !it->second.seen) continue;
    const Series& last = it->second;
    std::string_view rest;
    if (tags::kAct.Holds(tag, &rest)) {
      Layer& l = layer(std::string(rest));
      if (last.nonfinite) {
        l.nonfinite = true;
        l.nonfinite_what = "its output";
      }
    } else if (tags::kGrad.Holds(tag, &rest)) {
      Layer& l = layer(ModuleOf(rest));
      if (std::isfinite(last.l2)) l.grad_norm = std::isnan(l.grad_norm) ? last.l2 : std::hypot(l.grad_norm, last.l2);
      if (last.nonfinite) {
        l.nonfinite = true;
        l.nonfinite_what = "its gradient";
      }
    } else if (tags::kWeight.Holds(tag, &rest)) {
      if (last.nonfinite) {
        Layer& l = layer(ModuleOf(rest));
        l.nonfinite = true;
        l.nonfinite_what = "its weights";
      }
    } else if (tags::kUpdate.Holds(tag, &rest)) {
      if (last.ratios.empty()) continue;
      Layer& l = layer(ModuleOf(rest));
      if (last.numel > l.update_ratio_numel) {
        std::vector<double> recent(last.ratios.begin(), last.ratios.end());
        l.update_ratio = Median(std::span<const double>(recent));
        l.update_ratio_numel = last.numel;
      }
    }
  }
  // Small updates of a run that converged (UPDATE_RATIO_LOW's evidence) come from small
  // gradients: they say nothing against a layer.
  bool converged = false;
  for (const Finding& f : findings) {
    if (f.code != "UPDATE_RATIO_LOW") continue;
    const nlohmann::json evidence = nlohmann::json::parse(f.evidence_json, nullptr, false);
    converged |= evidence.is_object() && evidence.value("converged", false);
  }
  for (const Finding& f : findings) {
    if (f.location.empty()) continue;
    auto it = layers.find(f.location);
    if (it == layers.end()) it = layers.find(ModuleOf(f.location));
    if (it == layers.end()) continue;
    const Finding*& worst = it->second.finding;
    if (worst == nullptr || f.severity > worst->severity) worst = &f;
  }
  std::vector<double> norms;
  for (const auto& [name, l] : layers) {
    if (std::isfinite(l.grad_norm) && l.grad_norm > 0) norms.push_back(l.grad_norm);
  }
  const double median_norm = Median(std::span<const double>(norms));

  // Forward order where the watcher recorded it; layers it does not list keep first-seen order.
  std::vector<std::string> order;
  if (auto m = meta.find("module_order"); m != meta.end()) {
    const nlohmann::json j = nlohmann::json::parse(m->second, nullptr, false);
    if (j.is_array()) {
      for (const auto& v : j) {
        if (v.is_string() && layers.count(v.get<std::string>())) order.push_back(v.get<std::string>());
      }
    }
  }
  for (const std::string& name : seen_order) {
    if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
  }

  MarkFrozenModels(meta, &layers);
  std::vector<LayerHealth> out;
  for (const std::string& name : order) out.push_back(Score(layers.at(name), converged, median_norm, norms.size()));
  return out;
}

std::vector<LayerHealth> LayerHealthOf(const RunData& run, const std::vector<Finding>& findings) {
  LayerHealthBuilder builder;
  run.ReplaySteps(&builder, [&builder](int64_t) { builder.EndStep(); });
  std::vector<std::string> order;
  for (const TensorStatsSeries& s : run.tensor_stats) order.push_back(s.tag);
  return builder.Finish(order, run.meta, findings);
}

}  // namespace trainscope::doctor
