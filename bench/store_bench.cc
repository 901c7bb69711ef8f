// The write and read paths of the run store, from C++.
//   build/bench/store_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <filesystem>
#include <random>

#include "recorder/recorder.h"
#include "store/run_store.h"
#ifdef TRAINSCOPE_WITH_DOCTOR
#include "doctor/online_doctor.h"
#endif

namespace fs = std::filesystem;
using namespace trainscope;

namespace {

fs::path FreshDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("ts_bench_" + std::to_string(getpid())) / name;
  fs::remove_all(dir);
  return dir;
}

// Store only: batches as the writer thread hands them over (one flush = one transaction).
void BM_StoreWrite(benchmark::State& state) {
  const int series = static_cast<int>(state.range(0));
  const int points_per_series = static_cast<int>(state.range(1));
  const fs::path dir = FreshDir("store_write");
  std::unique_ptr<RunStore> store;
  RunMeta meta;
  if (!RunStore::Create(dir.string(), meta, &store).ok()) state.SkipWithError("create failed");
  std::vector<int64_t> ids(series);
  for (int s = 0; s < series; ++s) store->EnsureSeries("layer" + std::to_string(s) + "/value", SeriesKind::kScalar, &ids[s]);
  WriteBatch batch;
  int64_t step = 0;
  for (auto _ : state) {
    batch.scalars.clear();
    for (int s = 0; s < series; ++s) {
      for (int i = 0; i < points_per_series; ++i) {
        batch.scalars.push_back({ids[s], step + i, 1.7e9 + (step + i) * 0.001, std::sin(double(step + i))});
      }
    }
    step += points_per_series;
    Status st = store->Write(batch);
    if (!st.ok()) state.SkipWithError(st.message().c_str());
  }
  state.SetItemsProcessed(state.iterations() * series * points_per_series);
  store.reset();
  fs::remove_all(dir);
}
BENCHMARK(BM_StoreWrite)->Args({1, 100000})->Args({100, 1000})->Args({1000, 10})->Unit(benchmark::kMillisecond)->UseRealTime();

// End to end: the training thread logs through the recorder; the writer thread stores.
// Timed until every point is committed (Flush), so the rate is points stored per second.
void BM_RecorderLogAndStore(benchmark::State& state) {
  const int series = static_cast<int>(state.range(0));
  const int steps_per_iteration = 100000 / series;
  int run = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Recorder::Options options;
    options.logdir = FreshDir("recorder").string();
    options.name = "r" + std::to_string(run++);
#ifdef TRAINSCOPE_WITH_DOCTOR
    options.observers.push_back(std::make_shared<doctor::OnlineDoctor>());  // as ts.init runs it
#endif
    std::unique_ptr<Recorder> rec;
    if (!Recorder::Open(options, &rec).ok()) state.SkipWithError("open failed");
    std::vector<uint32_t> ids(series);
    for (int s = 0; s < series; ++s) rec->Series("layer" + std::to_string(s) + "/value", SeriesKind::kScalar, &ids[s]);
    state.ResumeTiming();
    for (int step = 0; step < steps_per_iteration * 10; ++step) {
      for (int s = 0; s < series; ++s) rec->LogScalar(ids[s], step, step * 0.5);
    }
    rec->Flush();
    state.PauseTiming();
    rec->Close();
    rec.reset();
    fs::remove_all(options.logdir);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * series * steps_per_iteration * 10);
}
BENCHMARK(BM_RecorderLogAndStore)->Arg(1)->Arg(100)->Unit(benchmark::kMillisecond)->UseRealTime();

// The training thread's side of logging tensor statistics (Recorder::LogTensorStats): 10,000
// calls, 40 series of gradient statistics, without and with their exponent histogram; the
// writer stores them meanwhile, its commits not timed.
void BM_RecorderLogTensorStats(benchmark::State& state) {
  const bool histogram = state.range(0) != 0;
  constexpr int kSeries = 40, kSteps = 250;
  std::vector<float> values(4096);
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<float>(i)) * 1e-3f;
  const TensorStats stats = ComputeTensorStats(values.data(), values.size(), histogram);
  int run = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Recorder::Options options;
    options.logdir = FreshDir("recorder_stats").string();
    options.name = "s" + std::to_string(run++);
    std::unique_ptr<Recorder> rec;
    if (!Recorder::Open(options, &rec).ok()) state.SkipWithError("open failed");
    std::vector<uint32_t> ids(kSeries);
    for (int s = 0; s < kSeries; ++s) rec->Series("grad/layer" + std::to_string(s), SeriesKind::kTensorStats, &ids[s]);
    state.ResumeTiming();
    for (int step = 0; step < kSteps; ++step) {
      for (int s = 0; s < kSeries; ++s) rec->LogTensorStats(ids[s], step, stats);
    }
    state.PauseTiming();
    rec->Close();
    rec.reset();
    fs::remove_all(options.logdir);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * kSeries * kSteps);
}
BENCHMARK(BM_RecorderLogTensorStats)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// Reader: a 1,000,000-point series decimated to 1,000 buckets (min, max, last each).
void BM_ReadDecimated(benchmark::State& state) {
  const fs::path dir = FreshDir("decimate");
  {
    std::unique_ptr<RunStore> store;
    RunMeta meta;
    RunStore::Create(dir.string(), meta, &store);
    int64_t id = 0;
    store->EnsureSeries("train/loss", SeriesKind::kScalar, &id);
    std::mt19937 rng(1);
    std::normal_distribution<double> noise;
    WriteBatch batch;
    for (int64_t i = 0; i < 1000000; ++i) batch.scalars.push_back({id, i, 1.7e9 + i * 0.01, noise(rng)});
    store->Write(batch);
    store->Close("finished", "");
  }
  std::unique_ptr<RunStore> reader;
  RunStore::OpenReadOnly(dir.string(), &reader);
  std::vector<Bucket> buckets;
  for (auto _ : state) {
    Status s = reader->ReadDecimated("train/loss", static_cast<size_t>(state.range(0)), INT64_MIN, INT64_MAX, &buckets);
    if (!s.ok() || buckets.empty()) state.SkipWithError("read failed");
    benchmark::DoNotOptimize(buckets.data());
  }
  state.SetItemsProcessed(state.iterations() * 1000000);
  reader.reset();
  fs::remove_all(dir);
}
BENCHMARK(BM_ReadDecimated)->Arg(1000)->Unit(benchmark::kMillisecond)->UseRealTime();

// The one-pass tensor statistics kernel: {values, histogram}. 1.3 M values are the benchmark
// transformer's gradients; 64, 640 and 4,096 the tiny MLP's tensors (biases, its head, a hidden
// layer), where the call's fixed costs weigh.
void BM_TensorStats(benchmark::State& state) {
  std::vector<float> values(state.range(0));
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0, 1e-3f);
  for (auto& v : values) v = normal(rng);
  for (auto _ : state) {
    TensorStats s = ComputeTensorStats(values.data(), values.size(), state.range(1) != 0);
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations() * values.size());
}
BENCHMARK(BM_TensorStats)
    ->ArgsProduct({{64, 640, 4096, 1300000}, {0, 1}})
    ->ArgNames({"values", "histogram"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
