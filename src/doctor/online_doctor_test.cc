#include "doctor/online_doctor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "recorder/recorder.h"
#include "recorder/recorder_test_fixture.h"

// The online doctor composed with a recorder, as the Python module and the LibTorch client
// compose it.
namespace trainscope::doctor {
namespace {

namespace fs = std::filesystem;

class RecorderWithDoctor : public RecorderFixture {};

// The online doctor stores a finding when it opens; what it learns afterwards (here: the
// loss stays negative to the end) is written over that row at Close, and into
// live_findings (run.findings).
TEST_F(RecorderWithDoctor, OnlineFindingsAreStoredInTheirFinalState) {
  std::unique_ptr<Recorder> rec;
  auto options = Options("final");
  options.observers.push_back(std::make_shared<OnlineDoctor>());
  options.flush_interval_seconds = 0.05;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  uint32_t id = 0;
  ASSERT_TRUE(rec->Series("train/loss", SeriesKind::kScalar, &id).ok());
  for (int64_t step = 0; step < 10; ++step) rec->LogScalar(id, step, -1.0);
  std::vector<Finding> stored;
  for (int i = 0; i < 300 && stored.empty(); ++i) {  // opened and stored while running
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::unique_ptr<RunStore> store;
    if (RunStore::OpenReadOnly(rec->run_dir(), &store).ok()) store->ReadFindings(&stored);
  }
  ASSERT_EQ(stored.size(), 1u);
  ASSERT_EQ(stored[0].code, "NEGATIVE_LOSS");
  EXPECT_LT(stored[0].last_step, 60);
  for (int64_t step = 10; step < 60; ++step) rec->LogScalar(id, step, -1.0);
  ASSERT_TRUE(rec->Close().ok());
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir_ / "final").string(), &store).ok());
  std::vector<Finding> after;
  ASSERT_TRUE(store->ReadFindings(&after).ok());
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].step, stored[0].step);
  EXPECT_EQ(after[0].last_step, 59);
  const std::vector<Finding> live = rec->live_findings();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].last_step, 59);
}

}  // namespace
}  // namespace trainscope::doctor
