// The measured statistics of a tensor (data/tensor_stats.json): the statistics recorded
// beside the core ones where a watched family asks for them (dead units, saturated values).
// Every part that stores, sends, shows or judges them loops over tensor_stats::kMeasured,
// so a new statistic is its kernels and one row of the table.
#pragma once

#include <cstddef>
#include <string_view>

namespace trainscope {

struct MeasuredTensorStats;

namespace tensor_stats {

// A named constant a statistic's kernels share (saturated_fraction's tails: high, low).
struct Threshold {
  std::string_view name;
  double value;
};

// One row of data/tensor_stats.json. `name` is the C++ field, the store column, the JSON and
// API key and the alert rules' stat.
struct MeasuredStat {
  std::string_view name;
  double MeasuredTensorStats::*field;
  std::string_view unit;
  std::string_view computed;
  // In the stores' first schema: always in the row checksum. A later statistic enters it
  // only when measured, so a row written before its column existed checks as it did.
  bool first_schema;
  const Threshold* thresholds;
  size_t threshold_count;
};

// Where the measured statistics start in a row the device path packs: after numel, nan,
// inf, zeros, min, max, sum and sum of squares.
inline constexpr size_t kFirstPackedSlot = 8;

}  // namespace tensor_stats
}  // namespace trainscope

#include "core/measured_stats_table.h"

namespace trainscope::tensor_stats {

// The row named `name`, or nullptr.
inline const MeasuredStat* FindMeasured(std::string_view name) {
  for (const MeasuredStat* stat : kMeasured) {
    if (stat->name == name) return stat;
  }
  return nullptr;
}

// The number of rows in the stores' first schema.
inline constexpr size_t FirstSchemaCount() {
  size_t n = 0;
  for (const MeasuredStat* stat : kMeasured) n += stat->first_schema;
  return n;
}

}  // namespace trainscope::tensor_stats
