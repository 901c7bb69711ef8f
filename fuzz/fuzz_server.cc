// Fuzzes the server's request path with the bytes a client sends: request line, headers and
// query through cpp-httplib's parser, then trainscope's checks (Host, token, method, sizes)
// and every handler, over a logdir of two small runs, one of them cut short. Whatever comes
// in, the answer is an HTTP response and nothing crashes, leaks or reads out of bounds.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "core/sample.h"
#include "server/server.h"
#include "store/run_store.h"

namespace {

namespace fs = std::filesystem;
using namespace trainscope;

// A run with a loss, a layer's gradient statistics, a vector, spans and a finding.
void MakeRun(const std::string& dir, int steps) {
  RunMeta meta;
  meta.name = fs::path(dir).filename().string();
  meta.config_json = R"({"lr": 0.1, "model": {"depth": 2}})";
  std::unique_ptr<RunStore> store;
  if (!RunStore::Create(dir, meta, &store).ok()) std::abort();
  int64_t loss = 0, grad = 0, hist = 0;
  (void)store->EnsureSeries("train/loss", SeriesKind::kScalar, &loss);
  (void)store->EnsureSeries("grad/fc.weight", SeriesKind::kTensorStats, &grad);
  (void)store->EnsureSeries("act/fc/values", SeriesKind::kVector, &hist);
  WriteBatch batch;
  const float values[4] = {0.5f, -0.25f, 0.125f, 0.0f};
  for (int step = 0; step < steps; ++step) {
    batch.scalars.push_back({loss, step, 1000.0 + step, step == steps / 2 ? 1e30 : 1.0 / (step + 1)});
    batch.tensor_stats.push_back({grad, step, 1000.0 + step, ComputeTensorStats(values, 4, true)});
    batch.vectors.push_back({hist, step, 1000.0 + step, {1.0f, 2.0f, static_cast<float>(step)}});
    batch.spans.push_back({step, "forward", 1000.0 + step, 0.01});
  }
  Finding f;
  f.code = "LOSS_SPIKE";
  f.severity = Severity::kWarning;
  f.step = f.last_step = steps / 2;
  f.location = "train/loss";
  batch.findings.push_back(f);
  if (!store->Write(batch).ok()) std::abort();
  (void)store->Close("finished", "");
}

server::DashboardServer* Server() {
  static server::DashboardServer* server = [] {
    const std::string logdir = "/tmp/fuzz_server_" + std::to_string(::getpid());
    fs::remove_all(logdir);
    MakeRun(logdir + "/alpha", 300);
    MakeRun(logdir + "/group/beta", 40);
    fs::resize_file(logdir + "/group/beta/trainscope.db", 8192);  // cut short: read as damaged
    // A data-parallel run for /api/ranks: three ranks, one cut short.
    MakeRun(logdir + "/dp/rank-0", 60);
    MakeRun(logdir + "/dp/rank-1", 60);
    MakeRun(logdir + "/dp/rank-2", 60);
    fs::resize_file(logdir + "/dp/rank-2/trainscope.db", 8192);
    server::ServerOptions options;
    options.logdir = logdir;
    options.port = 0;
    options.stream_keepalive = std::chrono::milliseconds(1);
    options.poll_interval = std::chrono::milliseconds(1);
    std::unique_ptr<server::DashboardServer> created;
    if (!server::DashboardServer::Create(options, &created).ok()) std::abort();
    return created.release();  // lives as long as the process
  }();
  return server;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string response = Server()->Answer(std::string_view(reinterpret_cast<const char*>(data), size));
  // httplib answers what it can parse; what it cannot, it closes without a word.
  if (!response.empty() && response.rfind("HTTP/1.1 ", 0) != 0) std::abort();
  return 0;
}
