// trainscope_doctor_bench RUN [RUN...]: the doctor's own cost on recorded runs. Reads each
// run into memory (not timed), orders its samples by step as the recorder would deliver
// them, and times the doctor judging them online (streaming), median of 5 repeats.
// Prints one JSON object per run: {"run", "steps", "samples", "doctor_seconds",
// "us_per_step", "findings"}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <variant>

#include "doctor/doctor.h"
#include "store/run_io.h"
#include "store/run_store.h"

using namespace trainscope;

namespace {

struct Event {
  int64_t step;
  size_t order;
  std::variant<const ScalarSeries*, const TensorStatsSeries*, const VectorSeries*, const Span*> what;
  size_t index;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s RUN_DIR...\n", argv[0]);
    return 2;
  }
  for (int a = 1; a < argc; ++a) {
    std::unique_ptr<RunStore> store;
    RunData data;
    Status s = RunStore::OpenReadOnly(argv[a], &store);
    if (s.ok()) s = ReadRun(*store, &data);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 2;
    }
    std::vector<Event> events;
    size_t order = 0;
    for (const auto& ser : data.scalars)
      for (size_t i = 0; i < ser.steps.size(); ++i) events.push_back({ser.steps[i], order++, &ser, i});
    for (const auto& ser : data.tensor_stats)
      for (size_t i = 0; i < ser.steps.size(); ++i) events.push_back({ser.steps[i], order++, &ser, i});
    for (const auto& ser : data.vectors)
      for (size_t i = 0; i < ser.steps.size(); ++i) events.push_back({ser.steps[i], order++, &ser, i});
    for (const auto& span : data.spans) events.push_back({span.step, order++, &span, 0});
    std::stable_sort(events.begin(), events.end(), [](const Event& x, const Event& y) { return x.step < y.step; });
    std::vector<double> times;
    size_t findings = 0;
    int64_t steps = 0;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      doctor::Doctor doc;
      for (const auto& [k, v] : data.meta) doc.OnMeta(k, v);
      for (const Event& e : events) {
        if (auto* sc = std::get_if<const ScalarSeries*>(&e.what)) {
          doc.OnScalar((*sc)->tag, e.step, (*sc)->wall_times[e.index], (*sc)->values[e.index]);
        } else if (auto* ts = std::get_if<const TensorStatsSeries*>(&e.what)) {
          doc.OnTensorStats((*ts)->tag, e.step, 0, (*ts)->stats[e.index]);
        } else if (auto* vs = std::get_if<const VectorSeries*>(&e.what)) {
          doc.OnVector((*vs)->tag, e.step, 0, (*vs)->values[e.index]);
        } else {
          doc.OnSpan(*std::get<const Span*>(e.what));
        }
      }
      doc.Finish();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      findings = doc.findings().size();
      steps = doc.steps_judged();
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    nlohmann::json out = {{"run", argv[a]},
                          {"steps", steps},
                          {"samples", events.size()},
                          {"doctor_seconds", median},
                          {"us_per_step", steps ? 1e6 * median / static_cast<double>(steps) : 0.0},
                          {"findings", findings}};
    std::printf("%s\n", out.dump().c_str());
  }
  return 0;
}
