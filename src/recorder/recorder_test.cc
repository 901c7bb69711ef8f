#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <chrono>
#include <mutex>
#include <thread>

#include "recorder/recorder.h"
#include "recorder/recorder_test_fixture.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;

class RecorderTest : public RecorderFixture {};

TEST_F(RecorderTest, EverythingLoggedIsStoredAfterClose) {
  std::unique_ptr<Recorder> rec;
  ASSERT_TRUE(Recorder::Open(Options("r1"), &rec).ok());
  uint32_t loss = 0;
  ASSERT_TRUE(rec->Series("train/loss", SeriesKind::kScalar, &loss).ok());
  for (int step = 0; step < 10000; ++step) rec->LogScalar(loss, step, step * 0.5);
  std::vector<std::string> rejected;
  rec->LogNamedScalars({{"opt/lr", 0.1}, {"", 1.0}, {"train/acc", 0.9}}, 10000, &rejected);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_NE(rejected[0].find("empty"), std::string::npos);
  ASSERT_TRUE(rec->Close().ok());

  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir_ / "r1").string(), &store).ok());
  std::vector<Point> points;
  ASSERT_TRUE(store->ReadScalars("train/loss", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), 10000u);
  EXPECT_EQ(points[9999].value, 9999 * 0.5);
  ASSERT_TRUE(store->ReadScalars("train/acc", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(points[0].step, 10000);
  RunMeta meta;
  ASSERT_TRUE(store->ReadMeta(&meta).ok());
  EXPECT_EQ(meta.status, "finished");
  EXPECT_EQ(meta.pid, ::getpid());
}

TEST_F(RecorderTest, FlushMakesDataVisibleToAConcurrentReader) {
  std::unique_ptr<Recorder> rec;
  auto options = Options("live");
  options.flush_interval_seconds = 60;  // only the explicit flush writes
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  uint32_t id = 0;
  ASSERT_TRUE(rec->Series("train/loss", SeriesKind::kScalar, &id).ok());
  rec->LogScalar(id, 1, 3.0);
  rec->Flush();
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly(rec->run_dir(), &store).ok());
  std::vector<Point> points;
  ASSERT_TRUE(store->ReadScalars("train/loss", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), 1u);
  RunMeta meta;
  ASSERT_TRUE(store->ReadMeta(&meta).ok());
  EXPECT_EQ(store->EffectiveStatus(meta), "running");
}

TEST_F(RecorderTest, SetMetaReachesTheStoreAndTheLastValueWins) {
  std::unique_ptr<Recorder> rec;
  auto options = Options("meta");
  options.flush_interval_seconds = 60;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  rec->SetMeta("module_order", "[\"a\"]");
  rec->SetMeta("module_order", "[\"a\",\"b\"]");
  rec->Flush();  // nothing else queued: the meta alone must be written
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly(rec->run_dir(), &store).ok());
  RunMeta meta;
  ASSERT_TRUE(store->ReadMeta(&meta).ok());
  EXPECT_EQ(meta.extra["module_order"], "[\"a\",\"b\"]");
  ASSERT_TRUE(rec->Close().ok());
}

TEST_F(RecorderTest, FullQueueDropsAndCountsInsteadOfBlocking) {
  std::unique_ptr<Recorder> rec;
  auto options = Options("tiny");
  options.queue_capacity = 100;
  options.flush_interval_seconds = 60;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  uint32_t id = 0;
  ASSERT_TRUE(rec->Series("x", SeriesKind::kScalar, &id).ok());
  for (int i = 0; i < 250; ++i) rec->LogScalar(id, i, i);
  EXPECT_EQ(rec->dropped(), 150u);
  ASSERT_TRUE(rec->Close().ok());
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir_ / "tiny").string(), &store).ok());
  RunMeta meta;
  ASSERT_TRUE(store->ReadMeta(&meta).ok());
  EXPECT_EQ(meta.dropped_points, 150);
}

// A store that fills up mid-run (the cap stands in for a full disk): the writer survives
// series that appear after the disk is full (their creation fails; before, the writer then
// handed the store an id it never gave and died of SIGSEGV), counts every dropped point
// under its cause, records the gap, and still marks the run finished.
TEST_F(RecorderTest, AFullStoreDropsCountsRecordsTheGapAndTheRunStillEndsFinished) {
  std::unique_ptr<Recorder> rec;
  auto options = Options("full");
  options.flush_interval_seconds = 60;  // only the explicit flushes write
  options.max_store_bytes = 400 * 1024;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  uint32_t echo = 0;
  ASSERT_TRUE(rec->Series("train/step_echo", SeriesKind::kScalar, &echo).ok());
  int64_t step = 0;
  for (; step < 100; ++step) rec->LogScalar(echo, step, static_cast<double>(step));
  rec->Flush();
  ASSERT_TRUE(rec->writer_status().ok()) << rec->writer_status().message();
  // ~2 MB of vectors: more than the store may hold. Each flush is refused whole.
  uint32_t big = 0;
  ASSERT_TRUE(rec->Series("big", SeriesKind::kVector, &big).ok());
  for (int i = 0; i < 50; ++i, ++step) {
    rec->LogScalar(echo, step, static_cast<double>(step));
    rec->LogVector(big, step, std::vector<float>(10000, 1.0f));
    rec->Flush();
  }
  // New series while the store is failing, then more points of all of them.
  for (int i = 0; i < 20; ++i, ++step) {
    std::vector<std::string> rejected;
    rec->LogNamedScalars({{"late/a", 1.0}, {"late/b", 2.0}}, step, &rejected);
    rec->LogScalar(echo, step, static_cast<double>(step));
    rec->Flush();
  }
  EXPECT_FALSE(rec->writer_status().ok());
  const uint64_t dropped = rec->dropped();
  EXPECT_GT(dropped, 0u);
  const auto drops = rec->drops();
  ASSERT_EQ(drops.size(), 1u);
  EXPECT_EQ(drops.begin()->first, "disk full");
  EXPECT_EQ(drops.begin()->second, dropped);
  const auto gaps = rec->gaps();
  ASSERT_EQ(gaps.size(), 1u);
  EXPECT_EQ(gaps[0].last_step, step - 1);  // nothing was written after the disk filled
  EXPECT_EQ(gaps[0].cause, "disk full");
  rec->Close();
  EXPECT_FALSE(fs::exists(logdir_ / "full" / kReserveFileName));

  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir_ / "full").string(), &store).ok());
  RunMeta meta;
  ASSERT_TRUE(store->ReadMeta(&meta).ok());
  EXPECT_EQ(store->EffectiveStatus(meta), "finished");
  EXPECT_EQ(meta.dropped_points, static_cast<int64_t>(dropped));
  EXPECT_EQ(meta.extra["drops"], "{\"disk full\":" + std::to_string(dropped) + "}");
  // What was stored before the fault reads back whole: steps 0..k-1, each its own value,
  // and the gap starts at k, the first step not stored.
  std::vector<Point> points;
  ASSERT_TRUE(store->ReadScalars("train/step_echo", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_GE(points.size(), 100u);
  ASSERT_LT(points.size(), static_cast<size_t>(step));
  for (size_t i = 0; i < points.size(); ++i) {
    EXPECT_EQ(points[i].step, static_cast<int64_t>(i));
    EXPECT_EQ(points[i].value, static_cast<double>(i));
  }
  const int64_t stored = static_cast<int64_t>(points.size());
  EXPECT_EQ(gaps[0].first_step, stored);
  EXPECT_EQ(meta.extra["gaps"], "[[" + std::to_string(stored) + "," + std::to_string(step - 1) + ",\"disk full\"]]");
}

TEST_F(RecorderTest, CriticalFindingIsWrittenWithoutWaitingForTheInterval) {
  std::unique_ptr<Recorder> rec;
  auto options = Options("urgent");
  options.flush_interval_seconds = 60;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  Finding f;
  f.code = "NONFINITE_LOSS";
  f.severity = Severity::kCritical;
  rec->AddFinding(f);
  std::vector<Finding> findings;
  for (int i = 0; i < 200 && findings.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::unique_ptr<RunStore> store;
    if (RunStore::OpenReadOnly(rec->run_dir(), &store).ok()) store->ReadFindings(&findings);
  }
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].code, "NONFINITE_LOSS");
}

// Thousands of tensor statistics (~1.1 KB each) a second would grow the queue and the
// buffers recycled after it to hundreds of MB: past Recorder::kEarlyWriteStats queued the
// writer commits at once instead of at the interval. Fewer than that wait for it.
TEST_F(RecorderTest, ManyTensorStatsAreWrittenWithoutWaitingForTheInterval) {
  std::unique_ptr<Recorder> rec;
  auto options = Options("heavy");
  options.flush_interval_seconds = 60;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  uint32_t few = 0, many = 0;
  ASSERT_TRUE(rec->Series("grad/few", SeriesKind::kTensorStats, &few).ok());
  ASSERT_TRUE(rec->Series("grad/many", SeriesKind::kTensorStats, &many).ok());
  TensorStats s;
  s.numel = 10;
  rec->LogTensorStats(few, 0, s);
  auto stored = [&](const char* tag) {
    std::vector<TensorStatsPoint> points;
    std::unique_ptr<RunStore> store;
    if (RunStore::OpenReadOnly(rec->run_dir(), &store).ok()) store->ReadTensorStats(tag, INT64_MIN, INT64_MAX, &points);
    return points.size();
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(stored("grad/few"), 0u);  // one sample waits for the interval
  for (int64_t step = 0; step < static_cast<int64_t>(Recorder::kEarlyWriteStats); ++step) {
    rec->LogTensorStats(many, step, s);
  }
  // The queue reached kEarlyWriteStats with the 4095th of these (the first sample counts);
  // the writer commits what is queued when it wakes, so the last one may wait.
  size_t seen = 0;
  for (int i = 0; i < 300 && seen < Recorder::kEarlyWriteStats - 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    seen = stored("grad/many");
  }
  EXPECT_GE(seen, Recorder::kEarlyWriteStats - 1);
  EXPECT_EQ(stored("grad/few"), 1u);
}

// What an observer sees (observer.h): each series' tag once, ticks with only the watched
// series' points, each point once, before it is committed; every commit after the write,
// a taker after the others, its batch given back for reuse; findings stored with the run
// and in live_findings, their final state written at Close.
class FakeObserver : public RecorderObserver {
 public:
  explicit FakeObserver(bool takes) : takes_(takes) {}
  Status OnOpen(const RunStart& run, ObserverHost& host) override {
    host_ = &host;
    name = run.name;
    return Status::Ok();
  }
  bool ticks() const override { return !takes_; }
  bool Watches(std::string_view tag, SeriesKind kind) override { return tag == "watched"; }
  void OnTick(const TickPoints& points, std::vector<Finding>* findings) override {
    std::lock_guard lock(mu);
    for (const auto& p : points.scalars) {
      ticked.push_back(points.tags[p.series_id] + "@" + std::to_string(p.step));
      if (p.value > 100) {
        Finding f;
        f.code = "FAKE_HIGH";
        f.step = f.last_step = p.step;
        findings->push_back(f);
      }
    }
  }
  bool takes_batches() const override { return takes_; }
  void OnCommit(Commit& commit) override {
    std::lock_guard lock(mu);
    for (size_t i = commit.first_new_tag; i < commit.tags.size(); ++i) new_tags.push_back(commit.tags[i]);
    committed_points += commit.batch.scalars.size();
    if (takes_ && commit.batch.scalars.capacity() > 0) {
      host_->RecycleBatch(std::move(commit.batch));
      commit.batch = WriteBatch{};
    }
    ++commits;
  }
  void OnClose(std::vector<Finding>* final_state) override {
    Finding f;
    f.code = "FAKE_HIGH";
    f.step = 3;
    f.last_step = 9;
    if (!takes_) final_state->push_back(f);
    closed = true;
  }
  std::mutex mu;
  std::string name;
  std::vector<std::string> ticked, new_tags;
  size_t committed_points = 0;
  int commits = 0;
  bool closed = false;

 private:
  bool takes_;
  ObserverHost* host_ = nullptr;
};

TEST_F(RecorderTest, ObserversSeeTicksCommitsAndClose) {
  auto taker = std::make_shared<FakeObserver>(true);
  auto ticked = std::make_shared<FakeObserver>(false);
  auto options = Options("observed");
  options.flush_interval_seconds = 60;  // only Flush() commits; ticks come every kRuleTick
  options.observers = {taker, ticked};  // the taker is told of commits last all the same
  std::unique_ptr<Recorder> rec;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  EXPECT_EQ(ticked->name, "observed");
  uint32_t watched = 0, other = 0;
  ASSERT_TRUE(rec->Series("watched", SeriesKind::kScalar, &watched).ok());
  ASSERT_TRUE(rec->Series("other", SeriesKind::kScalar, &other).ok());
  for (int step = 0; step < 5; ++step) {
    rec->LogScalar(watched, step, step == 3 ? 1000.0 : 1.0);
    rec->LogScalar(other, step, 1000.0);
  }
  for (int i = 0; i < 400; ++i) {  // a tick, long before the commit
    {
      std::lock_guard lock(ticked->mu);
      if (ticked->ticked.size() == 5) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  {
    std::lock_guard lock(ticked->mu);
    EXPECT_EQ(ticked->commits, 0);
    EXPECT_EQ(ticked->ticked, (std::vector<std::string>{"watched@0", "watched@1", "watched@2", "watched@3", "watched@4"}));
  }
  ASSERT_EQ(rec->live_findings().size(), 1u);
  rec->LogScalar(watched, 5, 1.0);
  rec->Flush();
  {
    std::lock_guard lock(ticked->mu);
    EXPECT_EQ(ticked->ticked.size(), 6u);  // the last point at the commit, once
    EXPECT_EQ(ticked->new_tags, (std::vector<std::string>{"watched", "other"}));
    EXPECT_EQ(ticked->committed_points, 11u);
  }
  {
    std::lock_guard lock(taker->mu);
    EXPECT_EQ(taker->committed_points, 11u);  // the whole batch, though added first
  }
  for (int step = 6; step < 10; ++step) rec->LogScalar(other, step, 1.0);
  ASSERT_TRUE(rec->Close().ok());
  EXPECT_TRUE(ticked->closed && taker->closed);
  EXPECT_EQ(taker->committed_points, 15u);
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir_ / "observed").string(), &store).ok());
  std::vector<Finding> findings;
  ASSERT_TRUE(store->ReadFindings(&findings).ok());
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].code, "FAKE_HIGH");
  EXPECT_EQ(findings[0].last_step, 9);  // the final state, written at Close
  ASSERT_EQ(rec->live_findings().size(), 1u);
  EXPECT_EQ(rec->live_findings()[0].last_step, 9);
}

// Tensor statistics queue as a summary and their non-empty histogram only (recorder.h,
// QueuedStats): a tick, a commit and the store see each point whole, histogram or not.
class StatsObserver : public RecorderObserver {
 public:
  Status OnOpen(const RunStart&, ObserverHost&) override { return Status::Ok(); }
  bool ticks() const override { return true; }
  bool Watches(std::string_view tag, SeriesKind kind) override { return kind == SeriesKind::kTensorStats; }
  void OnTick(const TickPoints& points, std::vector<Finding>*) override {
    std::lock_guard lock(mu);
    for (const auto& p : points.tensor_stats) ticked.push_back(p.stats);
  }
  void OnCommit(Commit& commit) override {
    std::lock_guard lock(mu);
    for (const auto& p : commit.batch.tensor_stats) committed.push_back(p.stats);
  }
  void OnClose(std::vector<Finding>*) override {}
  std::mutex mu;
  std::vector<TensorStats> ticked, committed;
};

TEST_F(RecorderTest, TensorStatsReachTicksCommitsAndTheStoreWhole) {
  auto observer = std::make_shared<StatsObserver>();
  auto options = Options("stats");
  options.observers = {observer};
  std::unique_ptr<Recorder> rec;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  uint32_t id = 0;
  ASSERT_TRUE(rec->Series("grad/w", SeriesKind::kTensorStats, &id).ok());
  std::vector<TensorStats> logged;
  for (int step = 0; step < 6; ++step) {
    const std::vector<float> values = {0.5f * static_cast<float>(step + 1), -3.0f, 0.0f, 1e-3f, 7.0f};
    TensorStats s = ComputeTensorStats(values.data(), values.size(), /*histogram=*/step % 2 == 1);
    s.dead_fraction = 0.25 * step;
    logged.push_back(s);
    rec->LogTensorStats(id, step, s);
  }
  ASSERT_TRUE(rec->Close().ok());
  const auto same = [](const TensorStats& a, const TensorStats& b) {
    return a.numel == b.numel && a.nan == b.nan && a.inf == b.inf && a.zeros == b.zeros && a.min == b.min &&
           a.max == b.max && a.sum == b.sum && a.sum_squares == b.sum_squares && a.abs_max == b.abs_max &&
           a.dead_fraction == b.dead_fraction && a.has_histogram == b.has_histogram &&
           a.exponent_counts == b.exponent_counts;
  };
  ASSERT_EQ(observer->ticked.size(), logged.size());
  ASSERT_EQ(observer->committed.size(), logged.size());
  for (size_t i = 0; i < logged.size(); ++i) {
    EXPECT_TRUE(same(observer->ticked[i], logged[i])) << "tick, point " << i;
    EXPECT_TRUE(same(observer->committed[i], logged[i])) << "commit, point " << i;
  }
  EXPECT_EQ(logged[1].exponent_counts[TensorStats::ExponentBin(7.0)], 1u);  // the case is not vacuous
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir_ / "stats").string(), &store).ok());
  std::vector<TensorStatsPoint> points;
  ASSERT_TRUE(store->ReadTensorStats("grad/w", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), logged.size());
  for (size_t i = 0; i < logged.size(); ++i) EXPECT_TRUE(same(points[i].stats, logged[i])) << "stored, point " << i;
}

TEST_F(RecorderTest, ExistingRunNameIsRefusedUnlessResumed) {
  std::unique_ptr<Recorder> rec;
  ASSERT_TRUE(Recorder::Open(Options("same"), &rec).ok());
  uint32_t id = 0;
  rec->Series("x", SeriesKind::kScalar, &id);
  rec->LogScalar(id, 0, 1.0);
  rec->Close();
  std::unique_ptr<Recorder> again;
  Status s = Recorder::Open(Options("same"), &again);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("already exists"), std::string::npos);
  auto resume = Options("same");
  resume.resume = true;
  ASSERT_TRUE(Recorder::Open(resume, &again).ok());
  again->Series("x", SeriesKind::kScalar, &id);
  again->LogScalar(id, 1, 2.0);
  again->Close();
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir_ / "same").string(), &store).ok());
  std::vector<Point> points;
  ASSERT_TRUE(store->ReadScalars("x", INT64_MIN, INT64_MAX, &points).ok());
  EXPECT_EQ(points.size(), 2u);
  EXPECT_FALSE(Recorder::Open(Options("../escape"), &again).ok());
}

}  // namespace
}  // namespace trainscope
