// The dashboard's JSON API over the run stores of one logdir, independent of HTTP so it is
// testable without a socket. Every endpoint is a read: nothing is ever written.
//
//   runs         -> {"runs": [{name, status, health, findings{critical,warning,info},
//                    start_time, end_time, heartbeat, max_step, config, final{tag: value}}]}
//   run          ?run=R -> {"meta", "max_step", "series": [{tag, kind, points, first_step,
//                    last_step, last_value}]}
//   scalars      ?run=R&tag=T[&width=1000][&min=S][&max=S] -> one series decimated to at most
//                    `width` buckets of equal step width, columnar: begin, end, step (last
//                    point's step), wall, last, min, max, count, nonfinite; non-finite
//                    numbers are null (the nonfinite count says they were there).
//   tensor_stats ?run=R&tag=T[&width][&min][&max][&hist=1] -> columnar statistics; over
//                    `width` points, one point per bucket is kept: the one with the largest
//                    L2 norm (non-finite first), so spikes survive. hist=1 adds the exponent
//                    histogram as rows of counts over [exponent_lo, exponent_hi).
//   layers       ?run=R&family=grad|weight|update|act|update_ratio[&metric=l2_norm][&width]
//                    -> a layer x step-bucket matrix (max of the metric per bucket), layers in
//                    the order their series were created (the model's order).
//   vectors      ?run=R&tag=T[&width][&min][&max] -> per-unit values over steps.
//   spans        ?run=R[&width][&min][&max] -> mean duration of each phase per step bucket.
//   findings     ?run=R -> findings, worst first (DESIGN.md JSON form).
//   config       ?run=R -> {"config": ...}
//   ranks        ?run=R[&family=grad|weight|update|act][&width=200] -> the runs R/rank-<r> of a
//                    data-parallel run side by side (server/rank_view.h): per-rank step time and
//                    throughput, loss and gradient norm per rank with their spread, per-layer
//                    norms per rank against the ranks' median, the ranks compared (findings);
//                    "unreadable": the ranks whose store could not be read, and why.
//
// Query parameters are bounded: at most kMaxParams, each value at most kMaxParamBytes, widths
// in [1, kMaxWidth], steps int64; anything else is a 400. Run names go through
// RunRegistry::Resolve (400/403/404).
//
// Thread-safe. Each thread keeps its own open stores (a RunStore is single-threaded),
// reopened when the file was replaced.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "server/run_registry.h"

namespace trainscope::server {

using QueryParams = std::multimap<std::string, std::string>;

struct ApiReply {
  int status = 200;
  std::string body;  // JSON
};

class Api {
 public:
  static constexpr size_t kMaxParams = 16;
  static constexpr size_t kMaxParamBytes = 2048;
  static constexpr int64_t kMaxWidth = 20000;
  static constexpr size_t kMaxVectorUnits = 4096;

  // `registry` must outlive the Api.
  explicit Api(RunRegistry* registry) : registry_(registry) {}

  // Whether the caller may read a project's runs (a team server's token file); null: every run.
  using ProjectFilter = std::function<bool(const std::string& project)>;
  // endpoint is the path after "/api/" ("runs", "scalars", ...). With `readable`, the runs
  // list holds only the runs of readable projects (names "project/run"), and a per-run
  // endpoint of another project's run is a 403.
  ApiReply Handle(const std::string& endpoint, const QueryParams& params, const ProjectFilter* readable = nullptr);
  // /metrics: every readable run's status, step, throughput, open findings by severity and
  // how long ago it last wrote, in OpenMetrics text (docs/server.md).
  std::string Metrics(const ProjectFilter* readable);

 private:
  struct RunSummaryCache;
  ApiReply Runs(const ProjectFilter* readable);
  ApiReply Ranks(const QueryParams& params, const ProjectFilter* readable);
  ApiReply Run(const std::string& db_path);
  ApiReply Scalars(const std::string& db_path, const QueryParams& params);
  ApiReply TensorStatsSeries(const std::string& db_path, const QueryParams& params);
  ApiReply Layers(const std::string& db_path, const QueryParams& params);
  ApiReply Vectors(const std::string& db_path, const QueryParams& params);
  ApiReply Spans(const std::string& db_path, const QueryParams& params);
  ApiReply Findings(const std::string& db_path);
  ApiReply Config(const std::string& db_path);
  // The layer x format fit table (only when the numerics part is built).
  ApiReply Numerics(const std::string& db_path, const QueryParams& params);

  // What a whole read of the store skips, as JSON ({"records", "series", "summary"}; "null"
  // when nothing, and for a run still being written): kept until the store's files change.
  std::string Damage(const std::string& db_path);

  RunRegistry* registry_;
  // Per-run summary for the runs list, recomputed only when the store's files changed.
  struct Summary {
    std::string signature;
    std::string json;
  };
  std::mutex summaries_mu_;
  std::unordered_map<std::string, Summary> summaries_;    // by run name
  std::unordered_map<std::string, Summary> run_details_;  // by store path, finished runs only
  std::unordered_map<std::string, Summary> damage_;       // by store path
};

}  // namespace trainscope::server
