// A run as a stream of samples, and a run held in memory.
//
// Everything that produces samples (the store's reader, the importers of other tools'
// files) writes into a SampleSink; everything that consumes a whole run (the doctor
// offline, the exporters, the CLI) reads a RunData. The doctor online is a SampleSink too,
// so the same code judges a live run, a recorded one and an imported log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/sample.h"

namespace trainscope {

class SampleSink {
 public:
  virtual ~SampleSink() = default;
  virtual void OnScalar(std::string_view tag, int64_t step, double wall_time, double value) = 0;
  virtual void OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) {}
  virtual void OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) {}
  virtual void OnSpan(const Span& span) {}
  virtual void OnFinding(const Finding& finding) {}
  // Run metadata and facts about the source: name, config (JSON), format, ...
  virtual void OnMeta(std::string_view key, std::string_view value) {}
};

struct ScalarSeries {
  std::string tag;
  std::vector<int64_t> steps;  // in the order logged (may repeat or go backwards)
  std::vector<double> wall_times;
  std::vector<double> values;
};

// The TensorStats of one series, stored compactly and read like a vector of TensorStats
// (size, [], back, range-for), except that elements are returned by value.
//
// Why not std::vector<TensorStats>: a TensorStats is 1.1 KB, 1 KB of it the 128 counters of
// the exponent histogram, of which a histogram imported from TensorBoard (30 buckets) fills
// about 6 and a recorded gradient 20-40. Here each point keeps its fixed fields (104 bytes)
// and only its non-zero bins (9 bytes each): loading 300 k histograms writes 50 MB instead
// of 340 MB, and writing fresh memory (page faults) was most of the time it took.
class TensorStatsColumn {
 public:
  class const_iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = TensorStats;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = TensorStats;
    const_iterator() = default;
    const_iterator(const TensorStatsColumn* column, size_t i) : column_(column), i_(i) {}
    TensorStats operator*() const { return (*column_)[i_]; }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator before = *this;
      ++i_;
      return before;
    }
    bool operator==(const const_iterator& other) const { return i_ == other.i_; }

   private:
    const TensorStatsColumn* column_ = nullptr;
    size_t i_ = 0;
  };

  size_t size() const { return heads_.size(); }
  bool empty() const { return heads_.empty(); }
  TensorStats operator[](size_t i) const;
  TensorStats front() const { return (*this)[0]; }
  TensorStats back() const { return (*this)[size() - 1]; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }

  void push_back(const TensorStats& stats);
  void reserve(size_t points) { heads_.reserve(points); }
  void clear();

 private:
  struct Head {
    TensorStatsSummary summary;
    uint64_t bins_begin;  // this point's non-zero bins: [bins_begin, next point's bins_begin)
  };
  std::vector<Head> heads_;
  std::vector<uint8_t> bin_index_;   // exponent bin, 0 .. TensorStats::kExponentBins - 1
  std::vector<uint64_t> bin_count_;  // its count (never 0)
};

struct TensorStatsSeries {
  std::string tag;
  std::vector<int64_t> steps;
  std::vector<double> wall_times;
  TensorStatsColumn stats;
};

struct VectorSeries {
  std::string tag;
  std::vector<int64_t> steps;
  std::vector<std::vector<float>> values;
};

// A whole run in memory, series in first-seen order.
//
// Built for bulk loading (an importer delivers millions of points over a few dozen tags):
// a point finds its series without allocating (the index is keyed by string_view), and
// usually without hashing at all: loggers write tags in the same order every step, so each
// series remembers which series came next last time and that guess is checked first.
class RunData : public SampleSink {
 public:
  void OnScalar(std::string_view tag, int64_t step, double wall_time, double value) override;
  void OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) override;
  void OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) override;
  void OnSpan(const Span& span) override { spans.push_back(span); }
  void OnFinding(const Finding& finding) override { findings.push_back(finding); }
  void OnMeta(std::string_view key, std::string_view value) override { meta[std::string(key)] = std::string(value); }

  const ScalarSeries* FindScalar(std::string_view tag) const;
  const TensorStatsSeries* FindTensorStats(std::string_view tag) const;
  // Largest step seen in any series (0 when empty).
  int64_t MaxStep() const;
  // Replays the run, series by series, into another sink.
  void Replay(SampleSink* sink) const;
  // Replays the run step by step: every sample of a step (scalars, then tensor stats,
  // vectors and spans, each kind in series order, a series' points of one step in the order
  // logged), then step_done(step). A sink that groups samples by step receives exactly what
  // Replay gives it, and can finish each step before the next begins instead of holding the
  // whole run. Meta comes first and recorded findings last, as in Replay.
  void ReplayInStepOrder(SampleSink* sink, const std::function<void(int64_t step)>& step_done) const;
  // The steps alone, as ReplayInStepOrder gives them (no meta, no findings): for a reader
  // that replays a long run one window of steps at a time (store/run_io.h).
  void ReplaySteps(SampleSink* sink, const std::function<void(int64_t step)>& step_done) const;

  std::vector<ScalarSeries> scalars;
  std::vector<TensorStatsSeries> tensor_stats;
  std::vector<VectorSeries> vectors;
  std::vector<Span> spans;
  std::vector<Finding> findings;  // findings recorded with the run (e.g. by the online doctor)
  std::map<std::string, std::string> meta;

 private:
  struct TagHash {
    using is_transparent = void;  // find(string_view) without building a std::string
    size_t operator()(std::string_view tag) const { return std::hash<std::string_view>{}(tag); }
  };
  using TagIndex = std::unordered_map<std::string, size_t, TagHash, std::equal_to<>>;
  // The series a kind of sample went to last, and for each series the one that followed it
  // last time (kNone when unknown).
  struct SeriesGuess {
    static constexpr size_t kNone = static_cast<size_t>(-1);
    size_t last = kNone;
    std::vector<size_t> next;
  };
  template <class Series>
  Series& FindOrAdd(std::vector<Series>& all, TagIndex& index, SeriesGuess& guess, std::string_view tag);
  template <class Series>
  static const Series* Find(const std::vector<Series>& all, const TagIndex& index, std::string_view tag);

  TagIndex scalar_index_, stats_index_, vector_index_;
  SeriesGuess scalar_guess_, stats_guess_, vector_guess_;
};

}  // namespace trainscope
