// What an importer reports besides the samples it delivers: how much it read, what it did
// not understand (skipped and counted, never silently), and where it stopped.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trainscope::ingest {

struct ImportStats {
  std::string format;           // "tfevents", "hf_trainer_state", "csv", ...
  uint64_t bytes = 0;           // bytes consumed
  uint64_t records = 0;         // records, lines or rows read
  uint64_t scalars = 0;         // scalar points delivered
  uint64_t tensor_stats = 0;    // histograms delivered (as TensorStats)
  uint64_t skipped_values = 0;  // values of kinds we do not import (images, audio, text, pr curves, ...)
  uint64_t unknown_fields = 0;  // protobuf fields we do not know, skipped
  uint64_t damaged = 0;         // records/rows/lines skipped because they were damaged
  std::vector<std::string> warnings;  // the first few problems, each naming file and place

  // tfevents: offset just past the last complete record; reading again from here picks up
  // what a writer appended since (a file still being written).
  uint64_t resume_offset = 0;
  bool partial_tail = false;  // the file ended inside a record (not an error)

  void Warn(std::string message) {
    if (warnings.size() < kMaxWarnings) warnings.push_back(std::move(message));
  }
  uint64_t points() const { return scalars + tensor_stats; }
  static constexpr size_t kMaxWarnings = 20;
};

// Called now and then while importing: bytes done of total bytes.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

}  // namespace trainscope::ingest
