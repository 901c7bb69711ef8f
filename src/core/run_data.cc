#include "core/run_data.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

namespace trainscope {

namespace {

// push_back, except that a vector past 1 MiB grows 4x at a time rather than 2x. Loading a
// large file appends tens of millions of points, and with doubling the copies on growth
// (into freshly faulted pages) add up to the whole final size again; with 4x to a third of
// it. The room reserved and not yet used is address space only: pages are not touched,
// so not resident, until a point is written there.
constexpr size_t kGrowFourfoldFrom = size_t{64} << 10;

template <class T, class U>
void Append(std::vector<T>& v, U&& x) {
  if (v.size() == v.capacity() && v.capacity() * sizeof(T) >= kGrowFourfoldFrom) v.reserve(4 * v.capacity());
  v.push_back(std::forward<U>(x));
}

}  // namespace

TensorStats TensorStatsColumn::operator[](size_t i) const {
  const Head& h = heads_[i];
  TensorStats s;
  static_cast<TensorStatsSummary&>(s) = h.summary;
  const size_t end = i + 1 < heads_.size() ? heads_[i + 1].bins_begin : bin_index_.size();
  for (size_t b = h.bins_begin; b < end; ++b) s.exponent_counts[bin_index_[b]] = bin_count_[b];
  return s;
}

void TensorStatsColumn::push_back(const TensorStats& s) {
  Append(heads_, Head{s, bin_index_.size()});
  for (int b = 0; b < TensorStats::kExponentBins; ++b) {
    if (s.exponent_counts[b]) {
      Append(bin_index_, static_cast<uint8_t>(b));
      Append(bin_count_, s.exponent_counts[b]);
    }
  }
}

void TensorStatsColumn::clear() {
  heads_.clear();
  bin_index_.clear();
  bin_count_.clear();
}

template <class Series>
Series& RunData::FindOrAdd(std::vector<Series>& all, TagIndex& index, SeriesGuess& guess, std::string_view tag) {
  // The guess: the series that followed the previous one last time. A string compare of
  // a short tag is cheaper than hashing it.
  size_t at = guess.last < guess.next.size() ? guess.next[guess.last] : SeriesGuess::kNone;
  if (at >= all.size() || all[at].tag != tag) {
    auto it = index.find(tag);
    if (it != index.end()) {
      at = it->second;
    } else {
      at = all.size();
      index.emplace(std::string(tag), at);
      all.emplace_back();
      all.back().tag = std::string(tag);
    }
    if (guess.last < guess.next.size()) guess.next[guess.last] = at;
  }
  if (guess.next.size() < all.size()) guess.next.resize(all.size(), SeriesGuess::kNone);
  guess.last = at;
  return all[at];
}

template <class Series>
const Series* RunData::Find(const std::vector<Series>& all, const TagIndex& index, std::string_view tag) {
  auto it = index.find(tag);
  return it == index.end() || it->second >= all.size() ? nullptr : &all[it->second];
}

void RunData::OnScalar(std::string_view tag, int64_t step, double wall_time, double value) {
  ScalarSeries& s = FindOrAdd(scalars, scalar_index_, scalar_guess_, tag);
  Append(s.steps, step);
  Append(s.wall_times, wall_time);
  Append(s.values, value);
}

void RunData::OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) {
  TensorStatsSeries& s = FindOrAdd(tensor_stats, stats_index_, stats_guess_, tag);
  Append(s.steps, step);
  Append(s.wall_times, wall_time);
  s.stats.push_back(stats);
}

void RunData::OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) {
  VectorSeries& s = FindOrAdd(vectors, vector_index_, vector_guess_, tag);
  Append(s.steps, step);
  Append(s.values, values);
}

const ScalarSeries* RunData::FindScalar(std::string_view tag) const { return Find(scalars, scalar_index_, tag); }

const TensorStatsSeries* RunData::FindTensorStats(std::string_view tag) const {
  return Find(tensor_stats, stats_index_, tag);
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

namespace {

// The order in which to read a series so that its steps ascend, points of one step kept in
// the order logged: empty when they already ascend (the usual case, nothing to sort).
std::vector<size_t> StepOrder(const std::vector<int64_t>& steps) {
  if (std::is_sorted(steps.begin(), steps.end())) return {};
  std::vector<size_t> order(steps.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return steps[a] < steps[b]; });
  return order;
}

// A read position in one series: its points in step order.
struct StepCursor {
  const std::vector<int64_t>* steps;
  std::vector<size_t> order;  // empty: identity
  size_t next = 0;

  bool done() const { return next == steps->size(); }
  size_t index() const { return order.empty() ? next : order[next]; }
  int64_t step() const { return (*steps)[index()]; }
};

template <class Series>
std::vector<StepCursor> CursorsOf(const std::vector<Series>& all) {
  std::vector<StepCursor> cursors;
  cursors.reserve(all.size());
  for (const Series& s : all) cursors.push_back({&s.steps, StepOrder(s.steps)});
  return cursors;
}

}  // namespace

void RunData::ReplayInStepOrder(SampleSink* sink, const std::function<void(int64_t step)>& step_done) const {
  for (const auto& [key, value] : meta) sink->OnMeta(key, value);
  ReplaySteps(sink, step_done);
  for (const auto& f : findings) sink->OnFinding(f);
}

void RunData::ReplaySteps(SampleSink* sink, const std::function<void(int64_t step)>& step_done) const {
  std::vector<StepCursor> scalar_cursors = CursorsOf(scalars);
  std::vector<StepCursor> stats_cursors = CursorsOf(tensor_stats);
  std::vector<StepCursor> vector_cursors = CursorsOf(vectors);
  std::vector<int64_t> span_steps;
  span_steps.reserve(spans.size());
  for (const Span& span : spans) span_steps.push_back(span.step);
  StepCursor span_cursor{&span_steps, StepOrder(span_steps)};

  constexpr int64_t kNoStep = std::numeric_limits<int64_t>::max();
  auto earliest = [](const std::vector<StepCursor>& cursors, int64_t step) {
    for (const StepCursor& c : cursors) {
      if (!c.done()) step = std::min(step, c.step());
    }
    return step;
  };
  for (;;) {
    int64_t step = earliest(scalar_cursors, kNoStep);
    step = earliest(stats_cursors, step);
    step = earliest(vector_cursors, step);
    if (!span_cursor.done()) step = std::min(step, span_cursor.step());
    if (step == kNoStep) break;
    for (size_t k = 0; k < scalars.size(); ++k) {
      const ScalarSeries& s = scalars[k];
      for (StepCursor& c = scalar_cursors[k]; !c.done() && c.step() == step; ++c.next) {
        sink->OnScalar(s.tag, step, s.wall_times[c.index()], s.values[c.index()]);
      }
    }
    for (size_t k = 0; k < tensor_stats.size(); ++k) {
      const TensorStatsSeries& s = tensor_stats[k];
      for (StepCursor& c = stats_cursors[k]; !c.done() && c.step() == step; ++c.next) {
        sink->OnTensorStats(s.tag, step, s.wall_times[c.index()], s.stats[c.index()]);
      }
    }
    for (size_t k = 0; k < vectors.size(); ++k) {
      const VectorSeries& s = vectors[k];
      for (StepCursor& c = vector_cursors[k]; !c.done() && c.step() == step; ++c.next) {
        sink->OnVector(s.tag, step, 0, s.values[c.index()]);
      }
    }
    for (; !span_cursor.done() && span_cursor.step() == step; ++span_cursor.next) sink->OnSpan(spans[span_cursor.index()]);
    step_done(step);
  }
}

}  // namespace trainscope
