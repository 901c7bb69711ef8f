// Sample sinks tuned for importers, where a handful of tags repeat millions of times.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/run_data.h"

namespace trainscope::ingest {

// Maps tags to small ids without allocating on a hit: keys are views into strings the
// interner owns (a deque never moves its elements).
class TagInterner {
 public:
  // Returns the id of tag and whether it was new.
  std::pair<uint32_t, bool> Intern(std::string_view tag) {
    auto it = ids_.find(tag);
    if (it != ids_.end()) return {it->second, false};
    storage_.emplace_back(tag);
    const auto id = static_cast<uint32_t>(storage_.size() - 1);
    ids_.emplace(storage_.back(), id);
    return {id, true};
  }
  const std::string& Name(uint32_t id) const { return storage_[id]; }
  size_t size() const { return storage_.size(); }

 private:
  std::deque<std::string> storage_;
  std::unordered_map<std::string_view, uint32_t> ids_;
};

// Appends to a RunData without its per-point tag lookup: the first point of a tag goes
// through RunData::OnScalar (which creates the series and its index entry); later points
// append to that series directly. Series only ever grow at the end, so RunData's index
// stays right. Everything else is forwarded.
class RunDataAppender : public SampleSink {
 public:
  explicit RunDataAppender(RunData* run) : run_(run) {}
  void OnScalar(std::string_view tag, int64_t step, double wall_time, double value) override {
    const auto [id, added] = scalar_tags_.Intern(tag);
    if (added) {
      run_->OnScalar(tag, step, wall_time, value);
      scalar_index_.push_back(static_cast<size_t>(run_->FindScalar(tag) - run_->scalars.data()));
      return;
    }
    ScalarSeries& s = run_->scalars[scalar_index_[id]];
    s.steps.push_back(step);
    s.wall_times.push_back(wall_time);
    s.values.push_back(value);
  }
  void OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) override {
    const auto [id, added] = stats_tags_.Intern(tag);
    if (added) {
      run_->OnTensorStats(tag, step, wall_time, stats);
      stats_index_.push_back(static_cast<size_t>(run_->FindTensorStats(tag) - run_->tensor_stats.data()));
      return;
    }
    TensorStatsSeries& s = run_->tensor_stats[stats_index_[id]];
    s.steps.push_back(step);
    s.wall_times.push_back(wall_time);
    s.stats.push_back(stats);
  }
  void OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) override {
    run_->OnVector(tag, step, wall_time, values);
  }
  void OnSpan(const Span& span) override { run_->OnSpan(span); }
  void OnFinding(const Finding& finding) override { run_->OnFinding(finding); }
  void OnMeta(std::string_view key, std::string_view value) override { run_->OnMeta(key, value); }

 private:
  RunData* run_;
  TagInterner scalar_tags_, stats_tags_;
  std::vector<size_t> scalar_index_, stats_index_;
};

}  // namespace trainscope::ingest
