// trainscope_server_gen: writes runs straight into run stores for the dashboard's
// end-to-end tests and benchmark (docs/bench/dashboard.md).
//
//   trainscope_server_gen demo   LOGDIR NAME [--steps 600] [--layers N]
//       a small classifier's run (or, with --layers, one of N parameters): loss with a spike at 60 % of the steps (and the
//       LOSS_SPIKE finding), per-layer grad/weight/update/act tensor statistics with
//       exponent histograms, per-unit gradient norms with one abnormal unit, step spans,
//       a leaking mem/rss (and MEMORY_LEAK), sys/ metrics, a config.
//   trainscope_server_gen bulk   LOGDIR NAME [--series 1000] [--steps 100000]
//       many scalar series, written in large batches (the benchmark's big run).
//   trainscope_server_gen writer LOGDIR NAME [--seconds 30] [--series 50]
//       keeps appending one step of every series every 10 ms, committing every 100 ms, as
//       a training's writer thread does: the load the server must read beside.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "store/run_store.h"

using namespace trainscope;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int Fail(const Status& s) {
  std::fprintf(stderr, "trainscope_server_gen: %s\n", s.message().c_str());
  return 2;
}

long Flag(int argc, char** argv, const char* name, long fallback) {
  for (int i = 0; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atol(argv[i + 1]);
  }
  return fallback;
}

// start_time: when the run's first point was taken (generated runs back-date their steps).
Status NewRun(const std::string& logdir, const std::string& name, const std::string& config,
              std::unique_ptr<RunStore>* store, double start_time = 0) {
  RunMeta meta;
  meta.name = name;
  meta.start_time = start_time > 0 ? start_time : Now();
  meta.heartbeat = meta.start_time;
  meta.host = "generator";
  meta.config_json = config;
  meta.command_line = "trainscope_server_gen";
  return RunStore::Create(logdir + "/" + name, meta, store);
}

// layers == 0: the small classifier's 8 parameters. Otherwise `layers` parameters of a
// transformer-like model (blocks.K.{attn.qkv,attn.proj,mlp.fc1,mlp.fc2}.{weight,bias}), with
// weights and updates every 10th step as run.watch records them.
int Demo(const std::string& logdir, const std::string& name, int steps, int layer_count = 0) {
  std::unique_ptr<RunStore> store;
  Status s = NewRun(logdir, name,
                    R"({"lr": 0.05, "batch_size": 64, "optimizer": "sgd", "model": "mlp-4", "seed": 7})", &store,
                    Now() - steps * 0.05);
  if (!s.ok()) return Fail(s);
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0, 1);
  std::vector<std::string> layers = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight",
                                     "fc3.bias", "head.weight", "head.bias"};
  if (layer_count > 0) {
    layers.clear();
    const char* parts[] = {"attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"};
    for (int k = 0; static_cast<int>(layers.size()) < layer_count; ++k) {
      for (const char* part : parts) {
        for (const char* kind : {"weight", "bias"}) {
          if (static_cast<int>(layers.size()) < layer_count) layers.push_back("blocks." + std::to_string(k) + "." + part + "." + kind);
        }
      }
    }
  }
  const int weight_every = layer_count > 0 ? 10 : 1;
  const std::vector<std::string> modules = {"relu1", "relu2", "tanh3"};
  auto id = [&](const std::string& tag, SeriesKind kind) {
    int64_t out = 0;
    Status st = store->EnsureSeries(tag, kind, &out);
    if (!st.ok()) std::fprintf(stderr, "%s\n", st.message().c_str());
    return out;
  };
  const int64_t loss = id("train/loss", SeriesKind::kScalar), acc = id("train/acc", SeriesKind::kScalar),
                val_loss = id("val/loss", SeriesKind::kScalar), val_acc = id("val/acc", SeriesKind::kScalar),
                lr = id("opt/lr", SeriesKind::kScalar), rss = id("mem/rss", SeriesKind::kScalar),
                cpu = id("sys/cpu_percent", SeriesKind::kScalar), throughput = id("perf/samples_per_s", SeriesKind::kScalar);
  std::vector<int64_t> grad, weight, update, units;
  for (const auto& l : layers) {
    grad.push_back(id("grad/" + l, SeriesKind::kTensorStats));
    weight.push_back(id("weight/" + l, SeriesKind::kTensorStats));
    update.push_back(id("update/" + l, SeriesKind::kTensorStats));
  }
  for (const auto& l : {"fc1.weight", "fc2.weight"}) units.push_back(id(std::string("grad_units/") + l, SeriesKind::kVector));
  std::vector<int64_t> act;
  for (const auto& m : modules) act.push_back(id("act/" + m, SeriesKind::kTensorStats));

  const int spike = steps * 6 / 10;
  const double t0 = Now() - steps * 0.05;
  std::vector<float> values(512);
  WriteBatch batch;
  for (int step = 1; step <= steps; ++step) {
    const double wall = t0 + step * 0.05;
    double l = 2.3 * std::exp(-step / (steps / 4.0)) + 0.15 + 0.03 * noise(rng);
    if (step == spike) l = 9.5;
    if (step > spike && step < spike + 5) l += 2.0 / (step - spike);
    batch.scalars.push_back({loss, step, wall, l});
    batch.scalars.push_back({acc, step, wall, std::clamp(1.0 - l / 2.6, 0.0, 0.99)});
    batch.scalars.push_back({lr, step, wall, 0.05 * (step < 50 ? step / 50.0 : 1.0)});
    batch.scalars.push_back({rss, step, wall, 512e6 + step * 40e3 + 2e6 * noise(rng)});
    batch.scalars.push_back({cpu, step, wall, 180 + 10 * noise(rng)});
    batch.scalars.push_back({throughput, step, wall, 1250 + 40 * noise(rng)});
    if (step % 25 == 0) {
      batch.scalars.push_back({val_loss, step, wall, l * 1.05 + 0.05});
      batch.scalars.push_back({val_acc, step, wall, std::min(0.98, 0.97 - l / 2.8)});
    }
    for (size_t i = 0; i < layers.size(); ++i) {
      // Deeper layers get smaller gradients; the spike step's gradients are 100x.
      const double scale = 0.02 / (1 + i) * (step == spike ? 100 : 1) * (1 + 0.2 * noise(rng));
      for (float& v : values) v = static_cast<float>(scale * noise(rng));
      batch.tensor_stats.push_back({grad[i], step, wall, ComputeTensorStats(values.data(), values.size(), true)});
      if (step % weight_every != 0) continue;
      for (float& v : values) v = static_cast<float>(0.1 * noise(rng));
      batch.tensor_stats.push_back({weight[i], step, wall, ComputeTensorStats(values.data(), values.size(), true)});
      const double ratio = (i == layers.size() - 1 ? 3e-2 : 1e-3) * (1 + 0.3 * noise(rng));  // the last bias steps too far
      for (float& v : values) v = static_cast<float>(0.1 * ratio * noise(rng));
      batch.tensor_stats.push_back({update[i], step, wall, ComputeTensorStats(values.data(), values.size(), true)});
    }
    for (size_t m = 0; m < modules.size(); ++m) {
      for (float& v : values) v = static_cast<float>(std::max(0.0, noise(rng)));
      TensorStats st = ComputeTensorStats(values.data(), values.size(), true);
      st.dead_fraction = m == 1 ? std::min(0.9, 0.05 + step / (steps * 1.2)) : 0.02 + 0.01 * std::abs(noise(rng));
      st.saturated_fraction = m == 2 ? 0.1 + 0.05 * std::abs(noise(rng)) : 0;
      batch.tensor_stats.push_back({act[m], step, wall, st});
    }
    for (size_t u = 0; u < units.size(); ++u) {
      std::vector<float> norms(32);
      for (size_t k = 0; k < norms.size(); ++k) norms[k] = static_cast<float>(0.01 * (1 + 0.2 * noise(rng)));
      norms[13] *= 25;  // one abnormal unit
      batch.vectors.push_back({units[u], step, wall, std::move(norms)});
    }
    double start = wall;
    for (const auto& [phase, seconds] : std::vector<std::pair<const char*, double>>{
             {"data", 0.012}, {"forward", 0.015}, {"backward", 0.02}, {"optimizer", 0.003}}) {
      const double d = seconds * (1 + 0.1 * noise(rng)) * (std::string(phase) == "data" && step > steps / 2 ? 2 : 1);
      batch.spans.push_back({step, phase, start, d});
      start += d;
    }
    if (step % 100 == 0 || step == steps) {
      s = store->Write(batch);
      if (!s.ok()) return Fail(s);
      batch = WriteBatch();
    }
  }
  Finding spike_finding;
  spike_finding.code = "LOSS_SPIKE";
  spike_finding.severity = Severity::kWarning;
  spike_finding.step = spike;
  spike_finding.last_step = spike + 4;
  spike_finding.location = "train/loss";
  spike_finding.summary = "train/loss jumped to 9.5 at step " + std::to_string(spike) + " (median 0.4, 40 MADs)";
  spike_finding.evidence_json = R"({"value": 9.5, "median": 0.4, "mad_score": 40.2, "grad_norm_ratio": 100})";
  spike_finding.causes = {{"lr_too_high", 0.5}, {"gradient_explosion", 0.3}};
  spike_finding.actions = {"Clip gradients (torch.nn.utils.clip_grad_norm_(params, 1.0)).",
                           "Lower the learning rate or lengthen the warm-up."};
  Finding leak;
  leak.code = "MEMORY_LEAK";
  leak.severity = Severity::kWarning;
  leak.step = 100;
  leak.last_step = steps;
  leak.location = "mem/rss";
  leak.summary = "host RSS grows ~0.04 MB/step since step 100";
  leak.evidence_json = R"({"tag": "mem/rss", "slope_bytes_per_step": 40000, "since_step": 100})";
  leak.causes = {{"retained_graph", 0.6}};
  leak.actions = {"Log loss.item() rather than the loss tensor; do not keep graphs alive across steps."};
  Finding dead;
  dead.code = "DEAD_UNITS";
  dead.severity = Severity::kCritical;
  dead.step = steps * 3 / 4;
  dead.last_step = steps;
  dead.location = "relu2";
  dead.summary = "relu2: 67% of units never fire";
  dead.evidence_json = R"({"dead_fraction": 0.67})";
  dead.causes = {{"dying_relu", 0.7}, {"lr_too_high", 0.2}};
  dead.actions = {"Use LeakyReLU/GELU, lower the learning rate, check the init."};
  batch.findings = {spike_finding, leak, dead};
  s = store->Write(batch);
  if (!s.ok()) return Fail(s);
  s = store->Close("finished", "");
  return s.ok() ? 0 : Fail(s);
}

int Bulk(const std::string& logdir, const std::string& name, int series, int steps) {
  std::unique_ptr<RunStore> store;
  Status s = NewRun(logdir, name, R"({"kind": "bulk", "series": )" + std::to_string(series) + "}", &store,
                    Now() - steps * 0.1);
  if (!s.ok()) return Fail(s);
  std::vector<int64_t> ids(series);
  for (int i = 0; i < series; ++i) {
    char tag[64];
    std::snprintf(tag, sizeof(tag), i == 0 ? "train/loss" : "metric/m%04d", i);
    s = store->EnsureSeries(tag, SeriesKind::kScalar, &ids[i]);
    if (!s.ok()) return Fail(s);
  }
  std::mt19937 rng(1);
  std::normal_distribution<double> noise(0, 1);
  const double t0 = Now() - steps * 0.1;
  // One chunk's worth of steps per batch: each series' points land in one full chunk row.
  const int per_batch = RunStore::kChunkPoints;
  for (int begin = 1; begin <= steps; begin += per_batch) {
    const int end = std::min(steps, begin + per_batch - 1);
    WriteBatch batch;
    batch.scalars.reserve(static_cast<size_t>(series) * (end - begin + 1));
    for (int i = 0; i < series; ++i) {
      for (int step = begin; step <= end; ++step) {
        double v = 1.0 / std::sqrt(1.0 + step / 100.0) + 0.01 * noise(rng);
        if (step % 9973 == 0) v += 5;  // rare spikes the decimation must keep
        batch.scalars.push_back({ids[i], step, t0 + step * 0.1, v});
      }
    }
    s = store->Write(batch);
    if (!s.ok()) return Fail(s);
  }
  s = store->Close("finished", "");
  return s.ok() ? 0 : Fail(s);
}

int Writer(const std::string& logdir, const std::string& name, int seconds, int series) {
  std::unique_ptr<RunStore> store;
  Status s = NewRun(logdir, name, R"({"kind": "writer"})", &store);
  if (!s.ok()) return Fail(s);
  std::vector<int64_t> ids(series);
  for (int i = 0; i < series; ++i) {
    s = store->EnsureSeries(i == 0 ? "train/loss" : "metric/w" + std::to_string(i), SeriesKind::kScalar, &ids[i]);
    if (!s.ok()) return Fail(s);
  }
  const double end = Now() + seconds;
  int64_t step = 0;
  WriteBatch batch;
  double last_commit = Now();
  while (Now() < end) {
    ++step;
    for (int i = 0; i < series; ++i) batch.scalars.push_back({ids[i], step, Now(), 1.0 / (1 + step * 0.01 + i)});
    if (Now() - last_commit >= 0.1) {
      s = store->Write(batch);
      if (!s.ok()) return Fail(s);
      batch = WriteBatch();
      last_commit = Now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  s = store->Write(batch);
  if (s.ok()) s = store->Close("finished", "");
  std::printf("writer: %lld steps x %d series\n", static_cast<long long>(step), series);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: trainscope_server_gen demo|bulk|writer LOGDIR NAME [options]\n");
    return 2;
  }
  const std::string mode = argv[1], logdir = argv[2], name = argv[3];
  if (mode == "demo") {
    return Demo(logdir, name, static_cast<int>(Flag(argc, argv, "--steps", 600)),
                static_cast<int>(Flag(argc, argv, "--layers", 0)));
  }
  if (mode == "bulk") {
    return Bulk(logdir, name, static_cast<int>(Flag(argc, argv, "--series", 1000)),
                static_cast<int>(Flag(argc, argv, "--steps", 100000)));
  }
  if (mode == "writer") {
    return Writer(logdir, name, static_cast<int>(Flag(argc, argv, "--seconds", 30)),
                  static_cast<int>(Flag(argc, argv, "--series", 50)));
  }
  std::fprintf(stderr, "trainscope_server_gen: unknown mode '%s'\n", mode.c_str());
  return 2;
}
