// Writing TensorBoard event files, so a trainscope run opens in TensorBoard.
//
// Scalars are written as Summary.Value.simple_value (a float32: TensorBoard's own scalar
// type, so values are rounded to float32). TensorStats are written as a HistogramProto of
// the magnitudes |x| on power-of-two buckets (one bucket per exponent bin, a first bucket
// at 0 for exact zeros): that is what the exponent histogram knows. Its min and max are
// those of |x| as far as the buckets tell (0 or the lowest bucket's edge, abs_max), num is
// numel minus non-finite values, sum and sum_squares are the tensor's. trainscope reads
// such a histogram back onto exactly the same exponent bins.
//
// Events are written in the order given; ExportRunToTfEvents orders a run by step (stable)
// as a live writer would, because TensorBoard's reader discards points of a tag that it
// thinks were "orphaned" when a step goes backwards.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "core/run_data.h"
#include "core/sample.h"
#include "core/status.h"

namespace trainscope::ingest {

class TfEventsWriter {
 public:
  // Creates dir if needed and a new file events.out.tfevents.<time>.<host>.<pid>.trainscope
  // in it, starting with the file_version event TensorBoard expects.
  static Status Create(const std::string& dir, std::unique_ptr<TfEventsWriter>* writer);
  // Opens exactly `path` (truncating it).
  static Status CreateFile(const std::string& path, double wall_time, std::unique_ptr<TfEventsWriter>* writer);
  ~TfEventsWriter();

  Status AddScalar(std::string_view tag, int64_t step, double wall_time, double value);
  Status AddHistogram(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats);
  Status Flush();
  Status Close();
  const std::string& path() const { return path_; }
  uint64_t events() const { return events_; }

 private:
  TfEventsWriter() = default;
  Status WriteEvent(std::string_view event);
  std::string path_;
  std::FILE* file_ = nullptr;
  std::string record_;
  uint64_t events_ = 0;
};

// The Event bytes (not framed) for a scalar, and for a histogram (tests use these).
std::string EncodeScalarEvent(std::string_view tag, int64_t step, double wall_time, float value);
std::string EncodeHistogramEvent(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats);

// Writes every scalar and tensor-stats series of run into a new event file in dir.
Status ExportRunToTfEvents(const RunData& run, const std::string& dir, std::string* path, uint64_t* events);

}  // namespace trainscope::ingest
