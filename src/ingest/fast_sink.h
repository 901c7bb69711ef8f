// Tag lookups tuned for importers, where a handful of tags repeat millions of times.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/run_data.h"

namespace trainscope::ingest {

// Maps tags to small ids without allocating on a hit: keys are views into strings the
// interner owns (a deque never moves its elements). Loggers write their tags in the same
// order every step, so each id remembers the id looked up after it last time; that guess
// is checked with one string compare before hashing.
class TagInterner {
 public:
  static constexpr uint32_t kNotFound = static_cast<uint32_t>(-1);

  // The id of tag, or kNotFound.
  uint32_t Find(std::string_view tag) {
    if (last_ < next_.size()) {
      const uint32_t guess = next_[last_];
      if (guess < storage_.size() && storage_[guess] == tag) return last_ = guess;
    }
    auto it = ids_.find(tag);
    if (it == ids_.end()) return kNotFound;
    Follow(it->second);
    return it->second;
  }
  // Returns the id of tag and whether it was new.
  std::pair<uint32_t, bool> Intern(std::string_view tag) {
    const uint32_t found = Find(tag);
    if (found != kNotFound) return {found, false};
    storage_.emplace_back(tag);
    const auto id = static_cast<uint32_t>(storage_.size() - 1);
    ids_.emplace(storage_.back(), id);
    next_.push_back(kNotFound);
    Follow(id);
    return {id, true};
  }
  const std::string& Name(uint32_t id) const { return storage_[id]; }
  size_t size() const { return storage_.size(); }

 private:
  void Follow(uint32_t id) {
    if (last_ < next_.size()) next_[last_] = id;
    last_ = id;
  }
  std::deque<std::string> storage_;
  std::unordered_map<std::string_view, uint32_t> ids_;
  std::vector<uint32_t> next_;  // per id: the id that came after it last time
  uint32_t last_ = kNotFound;
};

// Appends to a RunData. RunData's own appends no longer allocate or hash per point (see
// run_data.h), so this only forwards; it stays for the importers that wrap a RunData in it.
class RunDataAppender : public SampleSink {
 public:
  explicit RunDataAppender(RunData* run) : run_(run) {}
  void OnScalar(std::string_view tag, int64_t step, double wall_time, double value) override {
    run_->OnScalar(tag, step, wall_time, value);
  }
  void OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) override {
    run_->OnTensorStats(tag, step, wall_time, stats);
  }
  void OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) override {
    run_->OnVector(tag, step, wall_time, values);
  }
  void OnSpan(const Span& span) override { run_->OnSpan(span); }
  void OnFinding(const Finding& finding) override { run_->OnFinding(finding); }
  void OnMeta(std::string_view key, std::string_view value) override { run_->OnMeta(key, value); }

 private:
  RunData* run_;
};

}  // namespace trainscope::ingest
