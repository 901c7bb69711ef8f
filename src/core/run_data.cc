#include "core/run_data.h"

#include <algorithm>

namespace trainscope {

namespace {

template <class Series>
Series& FindOrAdd(std::vector<Series>& all, std::unordered_map<std::string, size_t>& index, std::string_view tag) {
  auto [it, added] = index.try_emplace(std::string(tag), all.size());
  if (added) {
    all.emplace_back();
    all.back().tag = std::string(tag);
  }
  return all[it->second];
}

}  // namespace

void RunData::OnScalar(std::string_view tag, int64_t step, double wall_time, double value) {
  ScalarSeries& s = FindOrAdd(scalars, scalar_index_, tag);
  s.steps.push_back(step);
  s.wall_times.push_back(wall_time);
  s.values.push_back(value);
}

void RunData::OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) {
  TensorStatsSeries& s = FindOrAdd(tensor_stats, stats_index_, tag);
  s.steps.push_back(step);
  s.wall_times.push_back(wall_time);
  s.stats.push_back(stats);
}

void RunData::OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) {
  VectorSeries& s = FindOrAdd(vectors, vector_index_, tag);
  s.steps.push_back(step);
  s.values.push_back(values);
}

const ScalarSeries* RunData::FindScalar(std::string_view tag) const {
  auto it = scalar_index_.find(std::string(tag));
  return it == scalar_index_.end() ? nullptr : &scalars[it->second];
}

const TensorStatsSeries* RunData::FindTensorStats(std::string_view tag) const {
  auto it = stats_index_.find(std::string(tag));
  return it == stats_index_.end() ? nullptr : &tensor_stats[it->second];
}

int64_t RunData::MaxStep() const {
  int64_t max_step = 0;
  for (const auto& s : scalars) {
    for (int64_t step : s.steps) max_step = std::max(max_step, step);
  }
  for (const auto& s : tensor_stats) {
    for (int64_t step : s.steps) max_step = std::max(max_step, step);
  }
  return max_step;
}

void RunData::Replay(SampleSink* sink) const {
  for (const auto& [key, value] : meta) sink->OnMeta(key, value);
  for (const auto& s : scalars) {
    for (size_t i = 0; i < s.steps.size(); ++i) sink->OnScalar(s.tag, s.steps[i], s.wall_times[i], s.values[i]);
  }
  for (const auto& s : tensor_stats) {
    for (size_t i = 0; i < s.steps.size(); ++i) sink->OnTensorStats(s.tag, s.steps[i], s.wall_times[i], s.stats[i]);
  }
  for (const auto& s : vectors) {
    for (size_t i = 0; i < s.steps.size(); ++i) sink->OnVector(s.tag, s.steps[i], 0, s.values[i]);
  }
  for (const auto& span : spans) sink->OnSpan(span);
  for (const auto& f : findings) sink->OnFinding(f);
}

}  // namespace trainscope
