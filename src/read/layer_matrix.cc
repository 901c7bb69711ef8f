#include "read/layer_matrix.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "core/step_buckets.h"
#include "core/tag.h"

namespace trainscope::read {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

bool IsTensorMetric(std::string_view metric) {
  for (std::string_view m : {"l2_norm", "abs_max", "mean", "std", "min", "max", "nonfinite", "zero_fraction"}) {
    if (m == metric) return true;
  }
  return tensor_stats::FindMeasured(metric) != nullptr;
}

double TensorMetric(const TensorStats& s, std::string_view metric) {
  if (metric == "l2_norm") return s.l2_norm();  // of the finite values; the matrix marks a tensor with NaN/Inf
  if (metric == "abs_max") return s.abs_max;
  if (metric == "mean") return s.mean();
  if (metric == "std") return s.stddev();
  if (metric == "min") return s.min;
  if (metric == "max") return s.max;
  if (const tensor_stats::MeasuredStat* stat = tensor_stats::FindMeasured(metric)) return s.*stat->field;
  if (metric == "nonfinite") return static_cast<double>(s.nan + s.inf);
  if (metric == "zero_fraction") return s.numel ? static_cast<double>(s.zeros) / s.numel : 0.0;
  return kNaN;
}

LayerMatrix BucketLayers(const std::vector<LayerPoints>& layers, int64_t width) {
  LayerMatrix m;
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (const LayerPoints& layer : layers) {
    for (const LayerPoint& p : layer.points) lo = std::min(lo, p.step), hi = std::max(hi, p.step);
  }
  if (lo > hi) return m;
  const StepBuckets buckets(lo, hi, width);
  for (size_t b = 0; b < buckets.count; ++b) m.steps.push_back(buckets.Begin(b));
  for (const LayerPoints& layer : layers) {
    m.layers.push_back(layer.name);
    std::vector<double> row(buckets.count, kNaN);
    std::vector<char> bad(buckets.count, 0);
    for (const LayerPoint& p : layer.points) {
      const size_t b = buckets.Of(p.step);
      if (p.nonfinite) bad[b] = 1;
      if (p.nonfinite || !std::isfinite(p.value)) continue;
      row[b] = std::isnan(row[b]) ? p.value : std::max(row[b], p.value);
    }
    m.values.push_back(std::move(row));
    m.nonfinite.push_back(std::move(bad));
  }
  return m;
}

Status ReadLayerPoints(RunStore& store, std::string_view family, std::string_view metric, int64_t step_min,
                       int64_t step_max, std::vector<LayerPoints>* layers) {
  layers->clear();
  std::vector<SeriesInfo> series;
  if (Status s = store.ListSeries(&series); !s.ok()) return s;
  std::sort(series.begin(), series.end(), [](const SeriesInfo& a, const SeriesInfo& b) { return a.id < b.id; });
  const bool update_ratio = family == "update_ratio";
  const tags::TagFamily& read = update_ratio ? tags::kUpdate : *tags::FamilyNamed(family);
  std::unordered_set<std::string> weights;
  if (update_ratio) {
    for (const SeriesInfo& info : series) {
      std::string_view param;
      if (info.kind == SeriesKind::kTensorStats && tags::kWeight.Holds(info.tag, &param)) weights.emplace(param);
    }
  }
  std::vector<TensorStatsPoint> points, weight_points;
  for (const SeriesInfo& info : series) {
    std::string_view name;
    if (info.kind != SeriesKind::kTensorStats || !read.Holds(info.tag, &name)) continue;
    LayerPoints layer{std::string(name), {}};
    if (update_ratio && !weights.count(layer.name)) continue;
    if (Status s = store.ReadTensorStats(info.tag, step_min, step_max, &points); !s.ok()) return s;
    if (update_ratio) {
      // |update| / |weight| at the same step: the relative size of one optimiser step.
      if (Status s = store.ReadTensorStats(tags::kWeight.Of(layer.name), step_min, step_max, &weight_points); !s.ok()) {
        return s;
      }
      struct WeightNorm {
        double l2;
        bool nonfinite;
      };
      std::unordered_map<int64_t, WeightNorm> weight_norm;
      for (const auto& w : weight_points) weight_norm[w.step] = {w.stats.l2_norm(), w.stats.nan + w.stats.inf > 0};
      for (const auto& p : points) {
        auto it = weight_norm.find(p.step);
        if (it == weight_norm.end()) continue;
        const bool nonfinite = it->second.nonfinite || p.stats.nan + p.stats.inf > 0;
        if (!nonfinite && it->second.l2 == 0) continue;
        const double ratio = nonfinite ? kNaN : p.stats.l2_norm() / it->second.l2;
        layer.points.push_back({p.step, ratio, nonfinite || !std::isfinite(ratio)});
      }
    } else {
      const bool counts_nonfinite = metric == "nonfinite";
      for (const auto& p : points) {
        const double value = TensorMetric(p.stats, metric);
        layer.points.push_back({p.step, value, !counts_nonfinite && (p.stats.nan + p.stats.inf > 0 || std::isinf(value))});
      }
    }
    layers->push_back(std::move(layer));
    if (layers->size() >= kMaxLayers) break;
  }
  return Status::Ok();
}

}  // namespace trainscope::read
