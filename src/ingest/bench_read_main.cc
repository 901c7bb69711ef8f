// ingest_bench_read FILE [--sink run|count] [--repeat N]: reads a TensorBoard event file with
// trainscope's reader and prints one JSON line: bytes, seconds (median of the repeats),
// MB/s, points/s, peak RSS, and the points delivered (scalars, tensor_stats) and kept (as
// counted in the sink: the in-memory run's series, or the counting sink's calls). bench/ingest/bench_tfevents.py drives it side by side with
// TensorBoard's own readers.
//
// ingest_bench_read --generate FILE --mb N [--scalars-only]: writes an event file of about N MB the way a
// training loop with TensorBoard's SummaryWriter would: per step 20 scalars (simple_value),
// every 10 steps 10 histograms of 30 buckets (HistogramProto, TensorBoard's bucket layout).
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/tag.h"
#include "ingest/fast_sink.h"
#include "ingest/proto_wire.h"
#include "ingest/tfevents_reader.h"
#include "ingest/tfrecord.h"

namespace {

// Counts without keeping: the reader's own speed, apart from the in-memory run.
class CountingSink : public trainscope::SampleSink {
 public:
  void OnScalar(std::string_view, int64_t, double, double value) override {
    sum += value;
    ++points;
  }
  void OnTensorStats(std::string_view, int64_t, double, const trainscope::TensorStats& s) override {
    sum += s.numel;
    ++points;
  }
  double sum = 0;
  uint64_t points = 0;
};

// Points a run holds (what was kept, counted from the run itself, not from the reader).
uint64_t PointsIn(const trainscope::RunData& run) {
  uint64_t n = 0;
  for (const auto& s : run.scalars) n += s.values.size();
  for (const auto& s : run.tensor_stats) n += s.stats.size();
  return n;
}

int Generate(const std::string& path, double megabytes, bool with_histograms) {
  using trainscope::ingest::wire::Writer;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::perror(path.c_str());
    return 1;
  }
  std::string out;
  auto frame = [&](const Writer& event) {
    out.clear();
    trainscope::ingest::AppendTfRecord(event.data(), &out);
    std::fwrite(out.data(), 1, out.size(), f);
    return out.size();
  };
  Writer fv;
  fv.Double(1, 1.7e9);
  fv.Bytes(3, "brain.Event:2");
  uint64_t bytes = frame(fv), scalars = 0, histograms = 0;
  const uint64_t target = static_cast<uint64_t>(megabytes * 1e6);
  uint64_t rng = 88172645463325252ull;
  auto uniform = [&] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (rng >> 11) * (1.0 / 9007199254740992.0);
  };
  for (int64_t step = 0; bytes < target; ++step) {
    const double wall = 1.7e9 + step * 0.1;
    for (int t = 0; t < 20; ++t) {
      Writer value, summary, event;
      value.Bytes(1, "train/metric_" + std::to_string(t));
      value.Float(2, static_cast<float>(1.0 / (1 + step * 1e-3) + 0.01 * uniform()));
      summary.Bytes(1, value.data());
      event.Double(1, wall);
      event.Varint(2, static_cast<uint64_t>(step));
      event.Bytes(5, summary.data());
      bytes += frame(event);
      ++scalars;
    }
    if (with_histograms && step % 10 == 0) {
      for (int h = 0; h < 10; ++h) {
        double limits[30], counts[30], sum = 0, sum_sq = 0, num = 0;
        for (int b = 0; b < 30; ++b) {
          limits[b] = -1.5 + 0.1 * (b + 1);
          counts[b] = std::floor(1000 * uniform());
          const double mid = limits[b] - 0.05;
          num += counts[b];
          sum += counts[b] * mid;
          sum_sq += counts[b] * mid * mid;
        }
        Writer histo, value, summary, event;
        histo.Double(1, -1.5);
        histo.Double(2, 1.5);
        histo.Double(3, num);
        histo.Double(4, sum);
        histo.Double(5, sum_sq);
        histo.PackedDoubles(6, limits, 30);
        histo.PackedDoubles(7, counts, 30);
        value.Bytes(1, trainscope::tags::kGrad.Of("layer" + std::to_string(h) + ".weight"));
        value.Bytes(5, histo.data());
        summary.Bytes(1, value.data());
        event.Double(1, wall);
        event.Varint(2, static_cast<uint64_t>(step));
        event.Bytes(5, summary.data());
        bytes += frame(event);
        ++histograms;
      }
    }
  }
  std::fclose(f);
  std::printf("{\"bytes\": %llu, \"scalars\": %llu, \"histograms\": %llu}\n", static_cast<unsigned long long>(bytes),
              static_cast<unsigned long long>(scalars), static_cast<unsigned long long>(histograms));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && !std::strcmp(argv[1], "--generate")) {
    const double mb = argc >= 5 && !std::strcmp(argv[3], "--mb") ? std::atof(argv[4]) : 512;
    const bool histograms = !(argc >= 6 && !std::strcmp(argv[5], "--scalars-only"));
    return Generate(argv[2], mb, histograms);
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: ingest_bench_read FILE [--sink run|count] [--repeat N]\n");
    return 2;
  }
  std::string path = argv[1], sink_kind = "run";
  int repeat = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--sink")) sink_kind = argv[i + 1];
    if (!std::strcmp(argv[i], "--repeat")) repeat = std::max(1, std::atoi(argv[i + 1]));
  }
  std::vector<double> seconds, cpu_seconds;
  auto cpu_now = [] {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  };
  trainscope::ingest::ImportStats last;
  uint64_t kept = 0;
  for (int r = 0; r < repeat; ++r) {
    trainscope::ingest::ImportStats stats;
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = cpu_now();
    trainscope::Status s;
    if (sink_kind == "count") {
      CountingSink sink;
      s = trainscope::ingest::ReadTfEventsFile(path, 0, &sink, &stats);
      kept = sink.points;
    } else {
      // Timed until the run is freed, as a process that reads, diagnoses and exits pays.
      trainscope::RunData run;
      s = trainscope::ingest::ReadTfEventsFile(path, 0, &run, &stats);
      kept = PointsIn(run);
    }
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    cpu_seconds.push_back(cpu_now() - cpu_start);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
    last = stats;
  }
  std::sort(seconds.begin(), seconds.end());
  std::sort(cpu_seconds.begin(), cpu_seconds.end());
  const double median = seconds[seconds.size() / 2];
  const double cpu_median = cpu_seconds[cpu_seconds.size() / 2];
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "{\"reader\": \"trainscope\", \"sink\": \"%s\", \"bytes\": %llu, \"seconds\": %.4f, \"mb_per_s\": %.1f, "
      "\"cpu_seconds\": %.4f, \"points\": %llu, \"points_per_s\": %.0f, \"peak_rss_mb\": %.1f, \"records\": %llu, "
      "\"scalars\": %llu, \"tensor_stats\": %llu, \"kept\": %llu}\n",
      sink_kind.c_str(), static_cast<unsigned long long>(last.bytes), median, last.bytes / median / 1e6, cpu_median,
      static_cast<unsigned long long>(last.points()), last.points() / median, ru.ru_maxrss / 1024.0,
      static_cast<unsigned long long>(last.records), static_cast<unsigned long long>(last.scalars),
      static_cast<unsigned long long>(last.tensor_stats), static_cast<unsigned long long>(kept));
  return 0;
}
