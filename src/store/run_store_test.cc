#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <sqlite3.h>

#include "core/run_data.h"
#include "store/run_io.h"
#include "store/postgres_run_store.h"
#include "store/run_store.h"
#include "store/test_database.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;

class RunStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ts_store_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<RunStore> NewStore(const std::string& name = "run") {
    RunMeta meta;
    meta.name = name;
    meta.config_json = R"({"lr": 0.1})";
    std::unique_ptr<RunStore> store;
    Status s = RunStore::Create((dir_ / name).string(), meta, &store);
    EXPECT_TRUE(s.ok()) << s.message();
    return store;
  }
  fs::path dir_;
};

// The contract every backend keeps: the same writes read back the same, on SQLite and on
// PostgreSQL (a server started for this test process).
enum class Backend { kSqlite, kPostgres };

class RunStoreContract : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : test) c = c == '/' ? '_' : c;
    dir_ = fs::temp_directory_path() / ("ts_store_" + std::to_string(::getpid()) + "_" + test);
    fs::remove_all(dir_);
    if (GetParam() == Backend::kPostgres) {
      prefix_ = testing::TestDatabaseUrl() + "#store-test-" + std::to_string(::getpid()) + "/" + test + "/";
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Location(const std::string& name) const {
    return GetParam() == Backend::kSqlite ? (dir_ / name).string() : prefix_ + name;
  }
  std::unique_ptr<RunStore> NewStore(const std::string& name = "run") {
    RunMeta meta;
    meta.name = name;
    meta.config_json = R"({"lr": 0.1})";
    std::unique_ptr<RunStore> store;
    Status s = RunStore::Create(Location(name), meta, &store);
    EXPECT_TRUE(s.ok()) << s.message();
    return store;
  }
  fs::path dir_;
  std::string prefix_;
};

INSTANTIATE_TEST_SUITE_P(Backends, RunStoreContract, ::testing::Values(Backend::kSqlite, Backend::kPostgres),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return std::string(info.param == Backend::kSqlite ? "sqlite" : "postgresql");
                         });

TEST_P(RunStoreContract, ScalarsRoundTripAcrossChunksInAppendOrder) {
  auto store = NewStore();
  int64_t loss = 0;
  ASSERT_TRUE(store->EnsureSeries("train/loss", SeriesKind::kScalar, &loss).ok());
  WriteBatch batch;
  const int n = RunStore::kChunkPoints * 2 + 17;
  for (int i = 0; i < n; ++i) batch.scalars.push_back({loss, i, 1000.0 + i * 0.01, 1.0 / (i + 1)});
  ASSERT_TRUE(store->Write(batch).ok());
  // A second flush extends the partial last chunk instead of adding tiny rows.
  WriteBatch more;
  more.scalars.push_back({loss, n, 2000.0, -1.0});
  ASSERT_TRUE(store->Write(more).ok());
  store.reset();

  std::unique_ptr<RunStore> reader;
  ASSERT_TRUE(RunStore::OpenReadOnly(Location("run"), &reader).ok());
  std::vector<Point> points;
  ASSERT_TRUE(reader->ReadScalars("train/loss", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), size_t(n + 1));
  EXPECT_EQ(points[123].step, 123);
  EXPECT_DOUBLE_EQ(points[123].value, 1.0 / 124);
  EXPECT_NEAR(points[123].wall_time, 1001.23, 1e-4);
  EXPECT_DOUBLE_EQ(points.back().value, -1.0);
  ASSERT_TRUE(reader->ReadScalars("train/loss", 10, 19, &points).ok());
  ASSERT_EQ(points.size(), 10u);
  EXPECT_EQ(points.front().step, 10);
  std::vector<SeriesInfo> series;
  ASSERT_TRUE(reader->ListSeries(&series).ok());
  ASSERT_EQ(series.size(), 1u);
  EXPECT_EQ(series[0].points, n + 1);
  EXPECT_EQ(series[0].last_step, n);
  EXPECT_DOUBLE_EQ(series[0].last_value, -1.0);
}

TEST_P(RunStoreContract, SmallWritesBecomeOneRowWhenTheChunkFills) {
  auto store = NewStore();
  int64_t a = 0, b = 0;
  ASSERT_TRUE(store->EnsureSeries("a", SeriesKind::kScalar, &a).ok());
  ASSERT_TRUE(store->EnsureSeries("b", SeriesKind::kScalar, &b).ok());
  int64_t step = 0;
  for (int flush = 0; flush < 3; ++flush) {  // 3 x 1000 interleaved points per series
    WriteBatch batch;
    for (int i = 0; i < 1000; ++i, ++step) {
      batch.scalars.push_back({a, step, 0, double(step)});
      batch.scalars.push_back({b, step, 0, -double(step)});
    }
    ASSERT_TRUE(store->Write(batch).ok());
  }
  std::map<int64_t, std::vector<int64_t>> rows;  // series -> row sizes in row order
  for (const char* tag : {"a", "b"}) {
    SeriesInfo info;
    ASSERT_TRUE(store->FindSeries(tag, &info).ok());
    std::vector<RunStore::ChunkSpan> chunks;
    ASSERT_TRUE(store->ListChunks(info, &chunks).ok());
    for (const auto& c : chunks) rows[info.id].push_back(c.count);
  }
  // Per series: one full chunk of 2048, then one small row with the last 952 points.
  EXPECT_EQ(rows[a], (std::vector<int64_t>{2048, 952}));
  EXPECT_EQ(rows[b], (std::vector<int64_t>{2048, 952}));
  std::vector<Point> points;
  ASSERT_TRUE(store->ReadScalars("b", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), 3000u);
  for (size_t i = 0; i < points.size(); ++i) ASSERT_EQ(points[i].value, -double(i));
}

TEST_P(RunStoreContract, DecimationKeepsEverySpike) {
  auto store = NewStore();
  int64_t id = 0;
  ASSERT_TRUE(store->EnsureSeries("train/loss", SeriesKind::kScalar, &id).ok());
  WriteBatch batch;
  const int n = 100000;
  for (int i = 0; i < n; ++i) batch.scalars.push_back({id, i, 0.0, i == 54321 ? 1e6 : (i == 777 ? -5.0 : 1.0)});
  ASSERT_TRUE(store->Write(batch).ok());
  std::vector<Bucket> buckets;
  ASSERT_TRUE(store->ReadDecimated("train/loss", 1000, INT64_MIN, INT64_MAX, &buckets).ok());
  ASSERT_EQ(buckets.size(), 1000u);
  int64_t total = 0;
  double max = 0, min = 1;
  for (const auto& b : buckets) {
    total += b.count;
    max = std::max(max, b.max);
    min = std::min(min, b.min);
    EXPECT_EQ(b.last_step, b.step_end - 1);
  }
  EXPECT_EQ(total, n);
  EXPECT_EQ(max, 1e6);
  EXPECT_EQ(min, -5.0);
  // A zoomed range gets buckets of its own width.
  ASSERT_TRUE(store->ReadDecimated("train/loss", 10, 54300, 54399, &buckets).ok());
  ASSERT_EQ(buckets.size(), 10u);
  EXPECT_EQ(buckets[2].max, 1e6);
  EXPECT_EQ(buckets[2].step_begin, 54320);
}

TEST_P(RunStoreContract, NonFiniteValuesAreKeptAsEvidence) {
  auto store = NewStore();
  int64_t id = 0;
  ASSERT_TRUE(store->EnsureSeries("train/loss", SeriesKind::kScalar, &id).ok());
  WriteBatch batch;
  batch.scalars = {{id, 0, 0, 1.0}, {id, 1, 0, NAN}, {id, 2, 0, INFINITY}, {id, 3, 0, -INFINITY}};
  ASSERT_TRUE(store->Write(batch).ok());
  std::vector<Point> points;
  ASSERT_TRUE(store->ReadScalars("train/loss", 0, 10, &points).ok());
  ASSERT_EQ(points.size(), 4u);
  EXPECT_TRUE(std::isnan(points[1].value));
  EXPECT_EQ(points[2].value, INFINITY);
  EXPECT_EQ(points[3].value, -INFINITY);
  std::vector<Bucket> buckets;
  ASSERT_TRUE(store->ReadDecimated("train/loss", 1, INT64_MIN, INT64_MAX, &buckets).ok());
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].nonfinite, 3);
  EXPECT_EQ(buckets[0].max, 1.0);
  EXPECT_EQ(buckets[0].last, -INFINITY);
}

TEST_P(RunStoreContract, StepsGoingBackwardsAreKeptAndCounted) {
  auto store = NewStore();
  int64_t id = 0;
  ASSERT_TRUE(store->EnsureSeries("train/loss", SeriesKind::kScalar, &id).ok());
  WriteBatch batch;
  batch.scalars = {{id, 10, 0, 1.0}, {id, 11, 0, 2.0}, {id, 5, 0, 3.0}, {id, 6, 0, 4.0}};
  ASSERT_TRUE(store->Write(batch).ok());
  std::vector<Point> points;
  ASSERT_TRUE(store->ReadScalars("train/loss", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[2].step, 5);
  RunMeta meta;
  ASSERT_TRUE(store->ReadMeta(&meta).ok());
  EXPECT_EQ(meta.backward_steps, 1);
}

TEST_P(RunStoreContract, TensorStatsVectorsSpansFindingsAndMetaRoundTrip) {
  auto store = NewStore();
  int64_t grad = 0, units = 0;
  ASSERT_TRUE(store->EnsureSeries("grad/fc.weight", SeriesKind::kTensorStats, &grad).ok());
  ASSERT_TRUE(store->EnsureSeries("grad_units/fc.weight", SeriesKind::kVector, &units).ok());
  int64_t wrong = 0;
  EXPECT_FALSE(store->EnsureSeries("grad/fc.weight", SeriesKind::kScalar, &wrong).ok());
  const float values[] = {1.0f, -2.0f, 0.0f, NAN, 1e-20f};
  WriteBatch batch;
  TensorStats stats = ComputeTensorStats(values, 5, true);
  stats.dead_fraction = 0.25;
  batch.tensor_stats.push_back({grad, 3, 5.0, stats});
  batch.vectors.push_back({units, 3, 5.0, {0.5f, 1.5f}});
  batch.spans.push_back({3, "forward", 10.0, 0.02});
  Finding finding;
  finding.code = "NONFINITE_GRAD";
  finding.severity = Severity::kCritical;
  finding.step = finding.last_step = 3;
  finding.location = "fc.weight";
  finding.summary = "NaN in the gradient";
  finding.evidence_json = R"({"nan": 1})";
  finding.causes = {{"lr_too_high", 0.6}, {"gradient_explosion", 0.3}};
  finding.actions = {"lower the LR"};
  batch.findings.push_back(finding);
  ASSERT_TRUE(store->Write(batch).ok());
  ASSERT_TRUE(store->Close("crashed", "SIGTERM").ok());
  store.reset();

  std::unique_ptr<RunStore> reader;
  ASSERT_TRUE(RunStore::OpenReadOnly(GetParam() == Backend::kSqlite ? (dir_ / "run" / kStoreFileName).string() : Location("run"), &reader).ok());
  std::vector<TensorStatsPoint> stats_back;
  ASSERT_TRUE(reader->ReadTensorStats("grad/fc.weight", 0, 100, &stats_back).ok());
  ASSERT_EQ(stats_back.size(), 1u);
  EXPECT_EQ(stats_back[0].stats.nan, 1u);
  EXPECT_EQ(stats_back[0].stats.zeros, 1u);
  EXPECT_EQ(stats_back[0].stats.min, -2.0);
  EXPECT_EQ(stats_back[0].stats.dead_fraction, 0.25);
  EXPECT_TRUE(std::isnan(stats_back[0].stats.saturated_fraction));
  EXPECT_EQ(stats_back[0].stats.exponent_counts, stats.exponent_counts);
  std::vector<VectorPoint> vectors;
  ASSERT_TRUE(reader->ReadVectors("grad_units/fc.weight", 0, 100, &vectors).ok());
  ASSERT_EQ(vectors.size(), 1u);
  EXPECT_EQ(vectors[0].values, (std::vector<float>{0.5f, 1.5f}));
  std::vector<Span> spans;
  ASSERT_TRUE(reader->ReadSpans(0, 100, &spans).ok());
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].phase, "forward");
  std::vector<Finding> findings;
  ASSERT_TRUE(reader->ReadFindings(&findings).ok());
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].code, "NONFINITE_GRAD");
  EXPECT_EQ(findings[0].severity, Severity::kCritical);
  ASSERT_EQ(findings[0].causes.size(), 2u);
  EXPECT_EQ(findings[0].causes[0].id, "lr_too_high");
  EXPECT_EQ(findings[0].actions, std::vector<std::string>{"lower the LR"});
  RunMeta meta;
  ASSERT_TRUE(reader->ReadMeta(&meta).ok());
  EXPECT_EQ(meta.name, "run");
  EXPECT_EQ(meta.status, "crashed");
  EXPECT_EQ(meta.exit_reason, "SIGTERM");
  EXPECT_EQ(meta.config_json, R"({"lr": 0.1})");
  EXPECT_GT(meta.end_time, 0);
}

TEST_P(RunStoreContract, RefusesToCreateOverAnExistingStore) {
  NewStore();
  std::unique_ptr<RunStore> again;
  Status s = RunStore::Create(Location("run"), RunMeta(), &again);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("already exists"), std::string::npos);
}

// A store written before a measured statistic existed (data/tensor_stats.json) has no column
// for it: a reader reads it as not measured, a writer adds the column, and every row's
// checksum holds. Played with the table's last row dropped from a new store.
TEST_F(RunStoreTest, AStoreWithoutAMeasuredColumnReadsItAsNaNAndGainsItWhenWritten) {
  const tensor_stats::MeasuredStat& last = *tensor_stats::kMeasured[tensor_stats::kMeasuredCount - 1];
  const float values[] = {0.5f, -1.0f, 0.0f};
  int64_t id = 0;
  {
    auto store = NewStore();
    ASSERT_TRUE(store->EnsureSeries("act/fc", SeriesKind::kTensorStats, &id).ok());
    WriteBatch batch;
    batch.tensor_stats.push_back({id, 1, 5.0, ComputeTensorStats(values, 3, false)});
    ASSERT_TRUE(store->Write(batch).ok());
    ASSERT_TRUE(store->Close("finished", "").ok());
  }
  const std::string path = (dir_ / "run" / kStoreFileName).string();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const std::string drop = "ALTER TABLE tensor_stats DROP COLUMN " + std::string(last.name);
    EXPECT_EQ(sqlite3_exec(db, drop.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  std::unique_ptr<RunStore> reader;
  ASSERT_TRUE(RunStore::OpenReadOnly(path, &reader).ok());
  std::vector<TensorStatsPoint> points;
  ASSERT_TRUE(reader->ReadTensorStats("act/fc", 0, 10, &points).ok());
  ASSERT_EQ(points.size(), 1u);
  EXPECT_TRUE(std::isnan(points[0].stats.*last.field));
  EXPECT_EQ(points[0].stats.min, -1.0);
  EXPECT_EQ(reader->damage().count(), 0);
  reader.reset();

  std::unique_ptr<RunStore> writer;
  Status s = RunStore::OpenForWrite((dir_ / "run").string(), &writer);
  ASSERT_TRUE(s.ok()) << s.message();
  TensorStats measured = ComputeTensorStats(values, 3, false);
  measured.*last.field = 0.75;
  WriteBatch batch;
  batch.tensor_stats.push_back({id, 2, 6.0, measured});
  ASSERT_TRUE(writer->Write(batch).ok());
  ASSERT_TRUE(writer->Close("finished", "").ok());
  writer.reset();

  ASSERT_TRUE(RunStore::OpenReadOnly(path, &reader).ok());
  ASSERT_TRUE(reader->ReadTensorStats("act/fc", 0, 10, &points).ok());
  ASSERT_EQ(points.size(), 2u);
  EXPECT_TRUE(std::isnan(points[0].stats.*last.field));
  EXPECT_EQ(points[1].stats.*last.field, 0.75);
  EXPECT_EQ(reader->damage().count(), 0);
}

TEST_F(RunStoreTest, NotSqliteTruncatedAndMissingFilesGiveClearErrors) {
  fs::create_directories(dir_ / "text");
  std::ofstream(dir_ / "text" / kStoreFileName) << "this is not a database, just text that is long enough to look like one";
  std::unique_ptr<RunStore> store;
  Status s = RunStore::OpenReadOnly((dir_ / "text").string(), &store);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not a trainscope store"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find((dir_ / "text").string()), std::string::npos);

  // A real store cut to 1.5 pages.
  {
    auto good = NewStore("cut");
    int64_t id = 0;
    good->EnsureSeries("x", SeriesKind::kScalar, &id);
    WriteBatch batch;
    for (int i = 0; i < 50000; ++i) batch.scalars.push_back({id, i, 0, double(i)});
    good->Write(batch);
    good->Close("finished", "");
  }
  const fs::path cut = dir_ / "cut" / kStoreFileName;
  fs::resize_file(cut, 24576);
  s = RunStore::OpenReadOnly(cut.string(), &store);
  if (s.ok()) {
    std::vector<Point> points;
    s = store->ReadScalars("x", INT64_MIN, INT64_MAX, &points);
  }
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(cut.string()), std::string::npos) << s.message();

  s = RunStore::OpenReadOnly((dir_ / "nothing").string(), &store);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no such file"), std::string::npos);
}

TEST_F(RunStoreTest, ListRunsFindsNestedRunsAndHandlesEmptyLogdir) {
  fs::create_directories(dir_);
  std::vector<RunEntry> runs;
  ASSERT_TRUE(ListRuns(dir_.string(), &runs).ok());
  EXPECT_TRUE(runs.empty());
  NewStore("b");
  NewStore("a/rank-0");
  ASSERT_TRUE(ListRuns(dir_.string(), &runs).ok());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].name, "a/rank-0");
  EXPECT_EQ(runs[1].name, "b");
  EXPECT_FALSE(ListRuns((dir_ / "missing").string(), &runs).ok());
}

}  // namespace
}  // namespace trainscope

namespace trainscope {
namespace {

// Steps at both ends of the int64 line: 2^64 steps of range, one more than a uint64_t holds.
TEST_P(RunStoreContract, DecimationOverTheWholeInt64Line) {
  auto store = NewStore();
  int64_t id = 0;
  ASSERT_TRUE(store->EnsureSeries("x", SeriesKind::kScalar, &id).ok());
  WriteBatch batch;
  batch.scalars.push_back({id, INT64_MIN, 0, 1.0});
  batch.scalars.push_back({id, 0, 0, 2.0});
  batch.scalars.push_back({id, INT64_MAX, 0, 3.0});
  ASSERT_TRUE(store->Write(batch).ok());
  for (size_t buckets : {size_t(1), size_t(2), size_t(1000)}) {
    std::vector<Bucket> out;
    ASSERT_TRUE(store->ReadDecimated("x", buckets, INT64_MIN, INT64_MAX, &out).ok());
    int64_t count = 0;
    double max = -1;
    for (const Bucket& b : out) {
      count += b.count;
      max = std::max(max, b.max);
    }
    EXPECT_EQ(count, 3) << buckets << " buckets";
    EXPECT_EQ(max, 3.0) << buckets << " buckets";
    EXPECT_LE(out.size(), buckets);
    EXPECT_EQ(out.back().last_step, INT64_MAX);
  }
}


// Every sample as text, and each step's end: what a step-by-step reader hands a sink.
class EventLog : public SampleSink {
 public:
  void OnScalar(std::string_view tag, int64_t step, double wall_time, double value) override {
    events.push_back("s " + std::string(tag) + " " + std::to_string(step) + " " + std::to_string(wall_time) + " " +
                     std::to_string(value));
  }
  void OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) override {
    events.push_back("t " + std::string(tag) + " " + std::to_string(step) + " " + std::to_string(stats.sum));
  }
  void OnVector(std::string_view tag, int64_t step, double, const std::vector<float>& values) override {
    events.push_back("v " + std::string(tag) + " " + std::to_string(step) + " " + std::to_string(values.size()));
  }
  void OnSpan(const Span& span) override { events.push_back("p " + span.phase + " " + std::to_string(span.step)); }
  std::vector<std::string> events;
};

// diagnose reads a stored run window by window (ReplayStepsInWindows) and must see exactly
// what the whole run replayed step by step gives: same samples, same order, same step ends,
// whatever the window, with steps that go backwards, repeat, sit far apart or only in spans.
TEST_P(RunStoreContract, WindowByWindowReadingGivesWhatTheWholeRunGives) {
  {
    auto store = NewStore();
    int64_t dense, odd, sparse, stats, vec;
    ASSERT_TRUE(store->EnsureSeries("train/loss", SeriesKind::kScalar, &dense).ok());
    ASSERT_TRUE(store->EnsureSeries("odd", SeriesKind::kScalar, &odd).ok());
    ASSERT_TRUE(store->EnsureSeries("sparse", SeriesKind::kScalar, &sparse).ok());
    ASSERT_TRUE(store->EnsureSeries("grad/w", SeriesKind::kTensorStats, &stats).ok());
    ASSERT_TRUE(store->EnsureSeries("hist", SeriesKind::kVector, &vec).ok());
    const float values[3] = {1, 2, 3};
    for (int batch_start = 0; batch_start < 5000; batch_start += 700) {  // partial chunks, then full ones
      WriteBatch batch;
      for (int step = batch_start; step < std::min(5000, batch_start + 700); ++step) {
        batch.scalars.push_back({dense, step, 100.0 + step, 1.0 / (step + 1)});
        if (step % 3 == 0) batch.scalars.push_back({odd, 4999 - step, 100.0 + step, step * 0.5});  // backwards
        if (step % 7 == 0) batch.scalars.push_back({odd, step, 100.0 + step, -1.0});                 // repeats
        if (step % 10 == 0) batch.tensor_stats.push_back({stats, step, 100.0 + step, ComputeTensorStats(values, 3, true)});
        if (step % 250 == 0) batch.vectors.push_back({vec, step, 100.0 + step, {1.0f, float(step)}});
        if (step % 5 == 0) batch.spans.push_back({step, "forward", 100.0 + step, 0.01});
      }
      ASSERT_TRUE(store->Write(batch).ok());
    }
    WriteBatch far;
    far.scalars.push_back({sparse, -5, 1.0, 7.0});
    far.scalars.push_back({sparse, int64_t{1} << 50, 2.0, 8.0});
    far.spans.push_back({-100, "setup", 0.5, 1.0});
    far.spans.push_back({int64_t{1} << 60, "teardown", 3.0, 1.0});
    ASSERT_TRUE(store->Write(far).ok());
    ASSERT_TRUE(store->Close("finished", "").ok());
  }
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly(Location("run"), &store).ok());
  RunData whole;
  ASSERT_TRUE(ReadRun(*store, &whole).ok());
  EventLog expected;
  whole.ReplaySteps(&expected, [&](int64_t step) { expected.events.push_back("end " + std::to_string(step)); });
  ASSERT_GT(expected.events.size(), 9000u);
  store->UnmapReads();
  for (int64_t window : {1, 7, 300, 4096, 1 << 20}) {
    EventLog got;
    ASSERT_TRUE(
        ReplayStepsInWindows(*store, &got, [&](int64_t step) { got.events.push_back("end " + std::to_string(step)); },
                             window)
            .ok());
    ASSERT_EQ(got.events.size(), expected.events.size()) << "window " << window;
    for (size_t i = 0; i < got.events.size(); ++i) ASSERT_EQ(got.events[i], expected.events[i]) << "window " << window << " event " << i;
  }
  EXPECT_EQ(store->damage().count(), 0u);
}

}  // namespace
}  // namespace trainscope
