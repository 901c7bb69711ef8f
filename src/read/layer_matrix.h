// A layer x step-bucket matrix of one tensor statistic: what the dashboard's per-layer views
// draw (/api/layers) and the HTML report's gradient heatmap. Per bucket the largest value (a
// spike is what a heatmap must not hide); a bucket where the tensor held NaN/Inf is marked
// non-finite whatever else it holds. Steps are bucketed by core/step_buckets.h, so a step
// lands in the same column in both.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/sample.h"
#include "store/run_store.h"

namespace trainscope::read {

// The statistics a matrix may show: l2_norm, abs_max, mean, std, min, max, nonfinite (NaN +
// Inf count), zero_fraction and each measured statistic (data/tensor_stats.json).
bool IsTensorMetric(std::string_view metric);
// NaN for a name that is no metric.
double TensorMetric(const TensorStats& stats, std::string_view metric);

// One layer's values in step order.
struct LayerPoint {
  int64_t step;
  double value;
  bool nonfinite;  // the tensor held NaN/Inf: its statistics name no finite value
};
struct LayerPoints {
  std::string name;
  std::vector<LayerPoint> points;
};

struct LayerMatrix {
  std::vector<std::string> layers;
  std::vector<int64_t> steps;  // each bucket's first step
  // [layer][bucket]: the largest finite value, NaN where none; nonfinite marks NaN/Inf.
  std::vector<std::vector<double>> values;
  std::vector<std::vector<char>> nonfinite;
};

// At most kMaxLayers rows: a bounded answer and picture.
inline constexpr size_t kMaxLayers = 2048;

// Buckets every layer's points into at most `width` buckets over the steps they span
// together (no buckets when none has a point).
LayerMatrix BucketLayers(const std::vector<LayerPoints>& layers, int64_t width);

// The layers of one family in a store, in the order their series were created (the
// model's order): family grad, weight, update or act with a metric, or update_ratio
// (|update| / |weight| at the same step; metric ignored). Points in [step_min, step_max].
Status ReadLayerPoints(RunStore& store, std::string_view family, std::string_view metric, int64_t step_min,
                       int64_t step_max, std::vector<LayerPoints>* layers);

}  // namespace trainscope::read
