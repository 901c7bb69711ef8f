#include "doctor/flight_recorder.h"

#include "doctor/detector.h"

namespace trainscope::doctor {

void FlightRecorder::Add(const StepFrame& frame) {
  for (const auto& [tag, value] : frame.scalars) {
    auto& q = scalars_[tag];
    q.emplace_back(frame.step, value);
    if (q.size() > steps_) q.pop_front();
  }
  for (const auto& [tag, s] : frame.stats) {
    auto& q = tensors_[tag];
    q.push_back({frame.step, s.l2_norm(), s.abs_max, static_cast<double>(s.nan + s.inf), s.mean(), s.stddev(),
                 s.dead_fraction, s.saturated_fraction});
    if (q.size() > steps_) q.pop_front();
  }
}

void FlightRecorder::AddGradNorm(int64_t step, double value) {
  grad_norm_.emplace_back(step, value);
  if (grad_norm_.size() > steps_) grad_norm_.pop_front();
}

std::vector<std::pair<int64_t, double>> FlightRecorder::ScalarHistory(const std::string& tag) const {
  auto it = scalars_.find(tag);
  if (it == scalars_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

std::vector<std::pair<int64_t, double>> FlightRecorder::NormHistory(const std::string& tag) const {
  std::vector<std::pair<int64_t, double>> out;
  auto it = tensors_.find(tag);
  if (it == tensors_.end()) return out;
  for (const auto& p : it->second) out.emplace_back(p.step, p.l2);
  return out;
}

nlohmann::json FlightRecorder::Snapshot(const std::vector<std::string>& tensor_tags, size_t max_other) const {
  nlohmann::json scalars = nlohmann::json::object();
  for (const auto& [tag, q] : scalars_) {
    nlohmann::json points = nlohmann::json::array();
    for (const auto& [step, v] : q) points.push_back({step, Num(v)});
    scalars[tag] = points;
  }
  nlohmann::json tensors = nlohmann::json::object();
  auto add = [&](const std::string& tag) {
    auto it = tensors_.find(tag);
    if (it == tensors_.end() || tensors.contains(tag)) return false;
    nlohmann::json points = nlohmann::json::array();
    for (const auto& p : it->second) {
      nlohmann::json point = {p.step, Num(p.l2), Num(p.abs_max), Num(p.nonfinite), Num(p.mean), Num(p.std)};
      if (!std::isnan(p.dead)) point.push_back({{"dead", p.dead}});
      if (!std::isnan(p.saturated)) point.push_back({{"saturated", p.saturated}});
      points.push_back(point);
    }
    tensors[tag] = points;
    return true;
  };
  for (const auto& tag : tensor_tags) add(tag);
  size_t others = 0;
  for (const auto& [tag, q] : tensors_) {
    if (others >= max_other) break;
    if (add(tag)) ++others;
  }
  nlohmann::json grad = nlohmann::json::array();
  for (const auto& [step, v] : grad_norm_) grad.push_back({step, Num(v)});
  return {{"steps", steps_},
          {"scalars", scalars},
          {"tensors", tensors},
          {"tensor_columns", {"step", "l2_norm", "abs_max", "nonfinite", "mean", "std"}},
          {"global_grad_norm", grad}};
}

}  // namespace trainscope::doctor
