// The API's per-run series endpoints (server/api.h): scalars, tensor statistics, layer
// matrices, vectors, phase times, findings, config, numerics.
#include "server/api.h"

#ifdef TRAINSCOPE_WITH_NUMERICS
#include "core/tag.h"
#include "numerics/fit.h"
#include "numerics/formats.h"
#include "numerics/report.h"
#endif

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "core/step_buckets.h"
#include "read/layer_matrix.h"
#include "read/phase_times.h"
#include "server/api_request.h"
#include "server/store_lease.h"
#include "store/json_forms.h"
#include "store/run_store.h"

namespace trainscope::server {

using namespace api_request;

namespace {

// Keeps, per bucket, the point that matters most for display: a non-finite one, else the
// one with the largest L2 norm. Returns indices into points, in step order.
std::vector<size_t> PickTensorPoints(const std::vector<TensorStatsPoint>& points, int64_t width) {
  std::vector<size_t> keep;
  if (points.empty()) return keep;
  if (static_cast<int64_t>(points.size()) <= width) {
    keep.resize(points.size());
    for (size_t i = 0; i < points.size(); ++i) keep[i] = i;
    return keep;
  }
  StepBuckets buckets(points.front().step, points.back().step, width);
  auto score = [](const TensorStats& s) {
    return s.nan || s.inf ? std::numeric_limits<double>::infinity() : s.sum_squares;
  };
  size_t current = SIZE_MAX;
  for (size_t i = 0; i < points.size(); ++i) {
    const size_t b = buckets.Of(points[i].step);
    if (keep.empty() || b != current) {
      keep.push_back(i);
      current = b;
    } else if (score(points[i].stats) > score(points[keep.back()].stats)) {
      keep.back() = i;
    }
  }
  return keep;
}

}  // namespace

ApiReply Api::Scalars(const std::string& db_path, const QueryParams& params) {
  const std::string* tag = Param(params, "tag");
  if (!tag) return Error(400, "parameter 'tag' is required");
  Range range;
  std::string error;
  if (!RangeParams(params, &range, &error)) return Error(400, error);
  StoreLease store;
  Status s = StoreFor(db_path, &store);
  std::vector<Bucket> buckets;
  if (s.ok()) s = store->ReadDecimated(*tag, static_cast<size_t>(range.width), range.min, range.max, &buckets);
  if (!s.ok()) return Error(s);
  // Built by hand: this is the hot endpoint, and a string is 3x faster than a json tree.
  std::string out;
  out.reserve(96 + buckets.size() * 120);
  auto number = [&out](double v) { AppendJsonSeriesNumber(&out, v); };
  auto integer = [&out](int64_t v) { out += std::to_string(v); };
  auto column = [&](const char* name, auto&& emit) {
    out += ",\"";
    out += name;
    out += "\":[";
    for (size_t i = 0; i < buckets.size(); ++i) {
      if (i) out += ',';
      emit(buckets[i]);
    }
    out += ']';
  };
  int64_t total = 0;
  for (const Bucket& b : buckets) total += b.count;
  out += "{\"tag\":" + Dump(*tag) + ",\"points\":" + std::to_string(total);
  column("begin", [&](const Bucket& b) { integer(b.step_begin); });
  column("end", [&](const Bucket& b) { integer(b.step_end); });
  column("step", [&](const Bucket& b) { integer(b.last_step); });
  column("wall", [&](const Bucket& b) { number(b.last_wall_time); });
  column("last", [&](const Bucket& b) { number(b.last); });
  column("min", [&](const Bucket& b) { number(b.min); });
  column("max", [&](const Bucket& b) { number(b.max); });
  column("count", [&](const Bucket& b) { integer(b.count); });
  column("nonfinite", [&](const Bucket& b) { integer(b.nonfinite); });
  out += '}';
  return {200, std::move(out)};
}

ApiReply Api::TensorStatsSeries(const std::string& db_path, const QueryParams& params) {
  const std::string* tag = Param(params, "tag");
  if (!tag) return Error(400, "parameter 'tag' is required");
  Range range;
  std::string error;
  if (!RangeParams(params, &range, &error)) return Error(400, error);
  int64_t hist = 0;
  if (!IntParam(params, "hist", 0, 1, &hist, &error)) return Error(400, error);
  StoreLease store;
  Status s = StoreFor(db_path, &store);
  std::vector<TensorStatsPoint> points;
  if (s.ok()) s = store->ReadTensorStats(*tag, range.min, range.max, &points);
  if (!s.ok()) return Error(s);
  const size_t total_points = points.size();
  if (hist) {
    // The histogram view wants the steps that have one (clients take them every Nth step):
    // thin among those only, so a long run's view is not left with gaps.
    std::vector<TensorStatsPoint> with_histogram;
    for (const auto& p : points) {
      if (p.stats.has_histogram) with_histogram.push_back(p);
    }
    if (!with_histogram.empty()) points = std::move(with_histogram);
  }
  const std::vector<size_t> keep = PickTensorPoints(points, range.width);
  json out = {{"tag", *tag}, {"points", total_points}};
  json step = json::array(), wall = json::array(), l2 = json::array(), mean = json::array(), stddev = json::array(),
       min = json::array(), max = json::array(), abs_max = json::array(), nan = json::array(), inf = json::array(),
       zeros = json::array(), numel = json::array();
  std::vector<json> measured(tensor_stats::kMeasuredCount, json::array());
  int lo = TensorStats::kExponentBins, hi = 0;
  for (size_t i : keep) {
    const TensorStatsPoint& p = points[i];
    step.push_back(p.step);
    wall.push_back(p.wall_time);
    l2.push_back(Num(p.stats.l2_norm()));
    mean.push_back(Num(p.stats.mean()));
    stddev.push_back(Num(p.stats.stddev()));
    min.push_back(Num(p.stats.min));
    max.push_back(Num(p.stats.max));
    abs_max.push_back(Num(p.stats.abs_max));
    nan.push_back(p.stats.nan);
    inf.push_back(p.stats.inf);
    zeros.push_back(p.stats.zeros);
    numel.push_back(p.stats.numel);
    for (size_t m = 0; m < tensor_stats::kMeasuredCount; ++m) measured[m].push_back(Num(p.stats.*tensor_stats::kMeasured[m]->field));
    for (int b = 0; b < TensorStats::kExponentBins; ++b) {
      if (p.stats.exponent_counts[b]) {
        lo = std::min(lo, b);
        hi = std::max(hi, b + 1);
      }
    }
  }
  out.update({{"step", step}, {"wall", wall}, {"l2_norm", l2}, {"mean", mean}, {"std", stddev}, {"min", min},
              {"max", max}, {"abs_max", abs_max}, {"nan", nan}, {"inf", inf}, {"zeros", zeros},
              {"numel", numel}});
  for (size_t m = 0; m < tensor_stats::kMeasuredCount; ++m) out[std::string(tensor_stats::kMeasured[m]->name)] = measured[m];
  if (hist) {
    if (lo >= hi) lo = hi = 0;
    json rows = json::array(), has = json::array();
    for (size_t i : keep) {
      const auto& counts = points[i].stats.exponent_counts;
      rows.push_back(std::vector<uint64_t>(counts.begin() + lo, counts.begin() + hi));
      has.push_back(points[i].stats.has_histogram);  // clients may record histograms every Nth step
    }
    out["has_hist"] = has;
    out["exponent_lo"] = lo + TensorStats::kMinExponent;  // bin i covers [2^(lo+i), 2^(lo+i+1))
    out["exponent_hi"] = hi + TensorStats::kMinExponent;
    out["hist"] = rows;
  }
  return {200, Dump(out)};
}

ApiReply Api::Layers(const std::string& db_path, const QueryParams& params) {
  const std::string* family_param = Param(params, "family");
  const std::string family = family_param ? *family_param : "grad";
  static const std::set<std::string> kFamilies = {"grad", "weight", "update", "act", "update_ratio"};
  if (!kFamilies.count(family)) return Error(400, "parameter 'family' must be grad, weight, update, act or update_ratio");
  const std::string* metric_param = Param(params, "metric");
  const std::string metric = metric_param ? *metric_param : "l2_norm";
  if (!read::IsTensorMetric(metric)) return Error(400, "parameter 'metric' names no tensor statistic");
  Range range;
  std::string error;
  if (!RangeParams(params, &range, &error)) return Error(400, error);
  StoreLease store;
  Status s = StoreFor(db_path, &store);
  std::vector<read::LayerPoints> layers;
  if (s.ok()) s = read::ReadLayerPoints(*store, family, metric, range.min, range.max, &layers);
  if (!s.ok()) return Error(s);
  const read::LayerMatrix m = read::BucketLayers(layers, range.width);
  json matrix = json::array();
  for (size_t l = 0; l < m.layers.size(); ++l) {
    json cells = json::array();
    for (size_t b = 0; b < m.steps.size(); ++b) {
      if (m.nonfinite[l][b]) cells.push_back("nonfinite");
      else cells.push_back(std::isnan(m.values[l][b]) ? json(nullptr) : json(m.values[l][b]));
    }
    matrix.push_back(std::move(cells));
  }
  return {200, Dump({{"family", family}, {"metric", family == "update_ratio" ? "update_ratio" : metric},
                     {"layers", m.layers}, {"step", m.steps}, {"values", matrix}})};
}

ApiReply Api::Vectors(const std::string& db_path, const QueryParams& params) {
  const std::string* tag = Param(params, "tag");
  if (!tag) return Error(400, "parameter 'tag' is required");
  Range range;
  range.width = 400;
  std::string error;
  if (!RangeParams(params, &range, &error)) return Error(400, error);
  StoreLease store;
  Status s = StoreFor(db_path, &store);
  std::vector<VectorPoint> points;
  if (s.ok()) s = store->ReadVectors(*tag, range.min, range.max, &points);
  if (!s.ok()) return Error(s);
  // Over `width` points, keep an evenly spaced subset (the last point always).
  std::vector<size_t> keep;
  const size_t n = points.size();
  const size_t w = static_cast<size_t>(range.width);
  if (n <= w) {
    for (size_t i = 0; i < n; ++i) keep.push_back(i);
  } else {
    for (size_t k = 0; k < w; ++k) keep.push_back(k * (n - 1) / (w - 1 ? w - 1 : 1));
  }
  size_t units = 0;
  json steps = json::array(), rows = json::array();
  for (size_t i : keep) {
    const auto& values = points[i].values;
    units = std::max(units, std::min(values.size(), kMaxVectorUnits));
    steps.push_back(points[i].step);
    json row = json::array();
    for (size_t u = 0; u < values.size() && u < kMaxVectorUnits; ++u) {
      row.push_back(std::isfinite(values[u]) ? json(values[u]) : json("nonfinite"));
    }
    rows.push_back(std::move(row));
  }
  return {200, Dump({{"tag", *tag}, {"points", n}, {"units", units}, {"step", steps}, {"values", rows}})};
}

ApiReply Api::Spans(const std::string& db_path, const QueryParams& params) {
  Range range;
  std::string error;
  if (!RangeParams(params, &range, &error)) return Error(400, error);
  StoreLease store;
  Status s = StoreFor(db_path, &store);
  std::vector<Span> spans;
  if (s.ok()) s = store->ReadSpans(range.min, range.max, &spans);
  if (!s.ok()) return Error(s);
  const read::PhaseTimes t = read::ComputePhaseTimes(spans, range.width);
  json per_phase = json::object();
  for (size_t p = 0; p < t.phases.size(); ++p) per_phase[t.phases[p]] = t.mean[p];
  return {200, Dump({{"phases", t.phases}, {"step", t.steps}, {"start", t.starts}, {"mean", per_phase},
                     {"step_time", t.step_time}, {"spans", t.spans}})};
}

ApiReply Api::Findings(const std::string& db_path) {
  StoreLease store;
  Status s = StoreFor(db_path, &store);
  std::vector<Finding> findings;
  if (s.ok()) s = store->ReadFindings(&findings);
  if (!s.ok()) return Error(s);
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity > b.severity;
    return a.step < b.step;
  });
  json list = json::array();
  for (const Finding& f : findings) list.push_back(FindingToJson(f));
  return {200, Dump({{"findings", list}})};
}

ApiReply Api::Config(const std::string& db_path) {
  StoreLease store;
  Status s = StoreFor(db_path, &store);
  RunMeta meta;
  if (s.ok()) s = store->ReadMeta(&meta);
  if (!s.ok()) return Error(s);
  json config = json::parse(meta.config_json, nullptr, false);
  if (config.is_discarded()) config = json::object();
  return {200, Dump({{"config", config}})};
}

#ifdef TRAINSCOPE_WITH_NUMERICS
// The layer x format table (docs/numerics.md): per tensor with exponent histograms, the share
// lost (overflow + flushed) in each format. ?formats=fp16,bf16 (default fp16, bf16, fp8-e4m3,
// fp8-e5m2), &loss_scale=k (gradients x 2^k), &steps=A:B.
ApiReply Api::Numerics(const std::string& db_path, const QueryParams& params) {
  const numerics::FormatTable& table = numerics::FormatTable::Builtin();
  std::vector<const numerics::FloatFormat*> formats;
  const std::string* names = Param(params, "formats");
  const std::string list = names ? *names : "fp16,bf16,fp8-e4m3,fp8-e5m2";
  if (Status s = table.FindList(list, &formats); !s.ok()) return Error(400, s.message());
  if (formats.empty() || formats.size() > 16) return Error(400, "parameter 'formats' must name 1 to 16 formats");
  numerics::FitOptions options;
  if (const std::string* k = Param(params, "loss_scale")) {
    const std::string text = k->rfind("2^", 0) == 0 ? k->substr(2) : *k;
    char* end = nullptr;
    const long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value < -126 || value > 126) {
      return Error(400, "parameter 'loss_scale' must be an exponent k (gradients x 2^k), -126..126");
    }
    options.grad_scale_exponent = static_cast<int>(value);
  }
  if (const std::string* steps = Param(params, "steps")) {
    const size_t colon = steps->find(':');
    char* end = nullptr;
    if (colon == std::string::npos) return Error(400, "parameter 'steps' must be A:B");
    const std::string a = steps->substr(0, colon), b = steps->substr(colon + 1);
    if (!a.empty()) {
      options.step_min = std::strtoll(a.c_str(), &end, 10);
      if (*end != '\0') return Error(400, "parameter 'steps' must be A:B");
    }
    if (!b.empty()) {
      options.step_max = std::strtoll(b.c_str(), &end, 10);
      if (*end != '\0') return Error(400, "parameter 'steps' must be A:B");
    }
  }
  StoreLease store;
  Status s = StoreFor(db_path, &store);
  std::vector<SeriesInfo> series;
  if (s.ok()) s = store->ListSeries(&series);
  if (!s.ok()) return Error(s);
  RunData run;
  std::vector<TensorStatsPoint> points;
  for (const SeriesInfo& info : series) {
    if (info.kind != SeriesKind::kTensorStats) continue;
    std::string family, layer;
    numerics::SplitTag(info.tag, &family, &layer);
    if (family != "grad" && family != "weight" && family != "update" && family != "act" && family != "input") continue;
    points.clear();
    s = store->ReadTensorStats(info.tag, options.step_min, options.step_max, &points);
    if (!s.ok()) return Error(s);
    for (const TensorStatsPoint& p : points) run.OnTensorStats(info.tag, p.step, p.wall_time, p.stats);
  }
  return {200, Dump(numerics::FitMatrixJson(run, formats, options))};
}
#endif

}  // namespace trainscope::server
