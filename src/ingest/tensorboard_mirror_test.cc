#include "ingest/tensorboard_mirror.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "recorder/recorder.h"
#include "recorder/recorder_test_fixture.h"

// The TensorBoard mirror composed with a recorder, as the Python module composes it.
namespace trainscope::ingest {
namespace {

namespace fs = std::filesystem;

class RecorderWithMirror : public RecorderFixture {};

TEST_F(RecorderWithMirror, TensorBoardMirrorIsFlushedWithEachCommit) {
  auto options = Options("tb");
  auto mirror = std::make_shared<TensorBoardMirror>();
  options.observers.push_back(mirror);
  options.flush_interval_seconds = 60;  // only Flush() commits
  std::unique_ptr<Recorder> rec;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  ASSERT_EQ(fs::path(mirror->path()).parent_path(), logdir_ / "tb" / "tensorboard");
  uint32_t loss = 0;
  ASSERT_TRUE(rec->Series("train/loss", SeriesKind::kScalar, &loss).ok());
  rec->LogScalar(loss, 0, 0.5);
  const auto before = fs::file_size(mirror->path());
  rec->Flush();
  const auto after = fs::file_size(mirror->path());
  EXPECT_GT(after, before);  // readers see the point once the store has it
  ASSERT_TRUE(rec->Close().ok());
}

}  // namespace
}  // namespace trainscope::ingest
