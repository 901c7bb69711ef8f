// A run as a stream of samples, and a run held in memory.
//
// Everything that produces samples (the store's reader, the importers of other tools'
// files) writes into a SampleSink; everything that consumes a whole run (the doctor
// offline, the exporters, the CLI) reads a RunData. The doctor online is a SampleSink too,
// so the same code judges a live run, a recorded one and an imported log.
#pragma once

#include <cstdint>
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

struct TensorStatsSeries {
  std::string tag;
  std::vector<int64_t> steps;
  std::vector<double> wall_times;
  std::vector<TensorStats> stats;
};

struct VectorSeries {
  std::string tag;
  std::vector<int64_t> steps;
  std::vector<std::vector<float>> values;
};

// A whole run in memory, series in first-seen order.
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

  std::vector<ScalarSeries> scalars;
  std::vector<TensorStatsSeries> tensor_stats;
  std::vector<VectorSeries> vectors;
  std::vector<Span> spans;
  std::vector<Finding> findings;  // findings recorded with the run (e.g. by the online doctor)
  std::map<std::string, std::string> meta;

 private:
  std::unordered_map<std::string, size_t> scalar_index_, stats_index_, vector_index_;
};

}  // namespace trainscope
