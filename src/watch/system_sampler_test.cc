#include "watch/system_sampler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

namespace trainscope::watch {
namespace {

namespace fs = std::filesystem;

TEST(SystemSampler, RecordsCpuAndRssAtTheReportedStep) {
  const fs::path logdir = fs::temp_directory_path() / ("ts_sampler_" + std::to_string(::getpid()));
  fs::remove_all(logdir);
  Recorder::Options options;
  options.logdir = logdir.string();
  options.name = "sys";
  std::unique_ptr<Recorder> rec;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  {
    SystemSampler sampler(rec.get(), 60.0);  // the thread stays idle; we sample by hand
    sampler.SetStep(42);
    // Keep a core busy for 0.3 s, so there is CPU time to measure.
    const auto start = std::chrono::steady_clock::now();
    volatile double burn = 0;
    while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(300)) burn = burn + 1e-9;
    sampler.SampleOnce();
    sampler.SetStep(43);
  }  // Stop(): one last sample, levels only (too soon after the last for rates)
  ASSERT_TRUE(rec->Close().ok());
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir / "sys").string(), &store).ok());
  std::vector<Point> points;
  ASSERT_TRUE(store->ReadScalars("sys/rss", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].step, 42);
  EXPECT_EQ(points[1].step, 43);
  EXPECT_GT(points[0].value, 1e6);
  ASSERT_TRUE(store->ReadScalars("sys/process_cpu_percent", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), 1u);
  EXPECT_GT(points[0].value, 20.0);  // the loop above kept a core busy (shared machines: loosely)
  EXPECT_LT(points[0].value, 205.0);
  ASSERT_TRUE(store->ReadScalars("sys/cpu_percent", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), 1u);
  EXPECT_GE(points[0].value, 0.0);
  EXPECT_LE(points[0].value, 100.0);
  fs::remove_all(logdir);
}

}  // namespace
}  // namespace trainscope::watch
