#include "doctor/flight_recorder.h"

#include "doctor/detector.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/tag.h"

namespace trainscope::doctor {

void FlightRecorder::Add(const StepFrame& frame) {
  for (const auto& [tag, value] : frame.scalars) {
    // A frame's tags are the doctor's interned names (StepFrame): one address per tag.
    auto [hit, added] = scalar_by_address_.try_emplace(tag.data());
    if (added) hit->second = &At(scalars_, tag);
    auto& q = *hit->second;
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

std::vector<std::pair<int64_t, double>> FlightRecorder::AbsMaxHistory(const std::string& tag) const {
  std::vector<std::pair<int64_t, double>> out;
  auto it = tensors_.find(tag);
  if (it == tensors_.end()) return out;
  for (const auto& p : it->second) out.emplace_back(p.step, p.abs_max);
  return out;
}

nlohmann::json FlightRecorder::Snapshot(const std::vector<std::string>& tensor_tags, size_t max_other) const {
  nlohmann::json scalars = nlohmann::json::object();
  auto add_scalar = [&](const std::string& tag, const std::deque<std::pair<int64_t, double>>& q) {
    nlohmann::json points = nlohmann::json::array();
    for (const auto& [step, v] : q) points.push_back({step, Num(v)});
    scalars[tag] = points;
  };
  // The object census logs dozens of `census/<type>` counts, nearly all flat: only the
  // types that changed over the window tell anything, the ones that changed most first.
  std::vector<std::pair<double, const std::string*>> census;
  size_t census_total = 0;
  for (const auto& [tag, q] : scalars_) {
    if (!tags::kCensus.Holds(tag)) {
      add_scalar(tag, q);
      continue;
    }
    ++census_total;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const auto& [step, v] : q) {
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
    if (hi > lo) census.emplace_back(hi - lo, &tag);
  }
  std::stable_sort(census.begin(), census.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (census.size() > max_census_) census.resize(max_census_);
  for (const auto& [change, tag] : census) add_scalar(*tag, scalars_.at(*tag));
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
  nlohmann::json out = {{"steps", steps_},
          {"scalars", scalars},
          {"tensors", tensors},
          {"tensor_columns", {"step", "l2_norm", "abs_max", "nonfinite", "mean", "std"}},
          {"global_grad_norm", grad}};
  if (census_total > census.size()) {
    out["census_omitted"] = {{"series", census_total - census.size()},
                             {"why", "census types that did not change over the window, or beyond the " +
                                         std::to_string(max_census_) + " that changed most"}};
  }
  return out;
}

}  // namespace trainscope::doctor
