// What only the PostgreSQL store has: many projects' runs in one database, names and tags
// that are SQL kept as text, schema versions, dropping a run, a server restarted under a
// writer. What both backends share is RunStoreContract (run_store_test.cc).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>

#include "store/pg_connection.h"
#include "store/postgres_run_store.h"
#include "store/postgres_schema.h"
#include "store/run_store.h"
#include "store/test_database.h"

namespace trainscope {
namespace {

class PostgresStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = testing::TestDatabaseUrl();
    project_ = "pg-test-" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  std::string Location(const std::string& project, const std::string& run) const {
    return url_ + "#" + project + "/" + run;
  }
  std::unique_ptr<RunStore> Create(const std::string& location) {
    RunMeta meta;
    meta.name = location.substr(location.rfind('/') + 1);
    std::unique_ptr<RunStore> store;
    Status s = RunStore::Create(location, meta, &store);
    EXPECT_TRUE(s.ok()) << s.message();
    return store;
  }
  std::unique_ptr<PgConnection> Connect() {
    std::unique_ptr<PgConnection> db;
    Status s = PgConnection::Connect(url_, url_, &db);
    EXPECT_TRUE(s.ok()) << s.message();
    return db;
  }
  void WriteLoss(RunStore* store, int64_t first, int64_t count) {
    int64_t id = 0;
    ASSERT_TRUE(store->EnsureSeries("loss", SeriesKind::kScalar, &id).ok());
    WriteBatch batch;
    for (int64_t step = first; step < first + count; ++step) batch.scalars.push_back({id, step, 1.0 * step, 0.5 * step});
    Status s = store->Write(batch);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  std::string url_, project_;
};

TEST_F(PostgresStoreTest, ListsTheRunsOfADatabaseAndOfOneProject) {
  Create(Location(project_ + "-a", "one"));
  Create(Location(project_ + "-a", "sweep/two"));
  Create(Location(project_ + "-b", "one"));
  std::vector<RunEntry> runs;
  ASSERT_TRUE(ListRuns(url_ + "#" + project_ + "-a", &runs).ok());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].name, project_ + "-a/one");
  EXPECT_EQ(runs[1].name, project_ + "-a/sweep/two");
  std::unique_ptr<RunStore> reader;
  ASSERT_TRUE(RunStore::OpenReadOnly(runs[1].dir, &reader).ok());
  RunMeta meta;
  ASSERT_TRUE(reader->ReadMeta(&meta).ok());
  EXPECT_EQ(meta.name, "two");
  ASSERT_TRUE(ListRuns(url_, &runs).ok());
  int ours = 0;
  for (const auto& r : runs) ours += r.name.rfind(project_, 0) == 0;
  EXPECT_EQ(ours, 3);
}

TEST_F(PostgresStoreTest, SqlInNamesAndTagsIsStoredAsText) {
  const std::string run = "x'); DROP TABLE run; --";
  const std::string tag = "loss\"; DELETE FROM series; -- ' \\";
  auto store = Create(Location(project_, run));
  int64_t id = 0;
  ASSERT_TRUE(store->EnsureSeries(tag, SeriesKind::kScalar, &id).ok());
  WriteBatch batch;
  batch.scalars.push_back({id, 1, 1.0, 2.5});
  Span span{1, "phase'); DROP TABLE span; --", 1.0, 0.5};
  batch.spans.push_back(span);
  ASSERT_TRUE(store->Write(batch).ok());
  ASSERT_TRUE(store->SetMetaValue("note'--", "value'; DROP TABLE meta; --").ok());
  store.reset();
  std::unique_ptr<RunStore> reader;
  ASSERT_TRUE(RunStore::OpenReadOnly(Location(project_, run), &reader).ok());
  std::vector<Point> points;
  ASSERT_TRUE(reader->ReadScalars(tag, 0, 10, &points).ok());
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(points[0].value, 2.5);
  std::vector<Span> spans;
  ASSERT_TRUE(reader->ReadSpans(0, 10, &spans).ok());
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].phase, span.phase);
  RunMeta meta;
  ASSERT_TRUE(reader->ReadMeta(&meta).ok());
  EXPECT_EQ(meta.extra["note'--"], "value'; DROP TABLE meta; --");
}

TEST_F(PostgresStoreTest, ANewerSchemaIsRefusedByName) {
  Create(Location(project_, "run"));
  auto db = Connect();
  ASSERT_TRUE(db->Exec("UPDATE trainscope_schema SET version = 99", "test").ok());
  std::unique_ptr<RunStore> reader;
  Status s = RunStore::OpenReadOnly(Location(project_, "run"), &reader);
  ASSERT_TRUE(db->Exec("UPDATE trainscope_schema SET version = " + std::to_string(KnownSchemaVersion()), "test").ok());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("schema is version 99, newer than this trainscope knows (" +
                             std::to_string(KnownSchemaVersion()) + ")"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().rfind(url_, 0), 0u) << "names the database: " << s.message();
}

TEST_F(PostgresStoreTest, ARunIsDroppedWithItsPartitions) {
  auto store = Create(Location(project_, "run"));
  WriteLoss(store.get(), 0, 100);
  store.reset();
  auto db = Connect();
  PgResult partitions;
  const char* const kCount = "SELECT count(*) FROM pg_class WHERE relname LIKE $1";
  PgResult run;
  ASSERT_TRUE(db->Query("SELECT id FROM run WHERE project = $1", PgParams().Text(project_), "test", &run).ok());
  ASSERT_EQ(run.rows(), 1);
  const std::string pattern = "%_run_" + std::to_string(run.Int(0, 0));
  ASSERT_TRUE(db->Query(kCount, PgParams().Text(pattern), "test", &partitions).ok());
  EXPECT_EQ(partitions.Int(0, 0), 4);
  ASSERT_TRUE(PostgresRunStore::DropRun(Location(project_, "run")).ok());
  ASSERT_TRUE(db->Query(kCount, PgParams().Text(pattern), "test", &partitions).ok());
  EXPECT_EQ(partitions.Int(0, 0), 0);
  std::unique_ptr<RunStore> reader;
  Status s = RunStore::OpenReadOnly(Location(project_, "run"), &reader);
  EXPECT_TRUE(s.IsNotFound()) << s.message();
}

TEST_F(PostgresStoreTest, AWriterGoesOnAfterTheServerRestarts) {
  if (std::getenv("TRAINSCOPE_TEST_POSTGRES")) GTEST_SKIP() << "restarts only the server this process started";
  auto store = Create(Location(project_, "run"));
  WriteLoss(store.get(), 0, 3000);
  const std::string dir = "/tmp/trainscope-test-pg-" + std::to_string(::getpid());
  ASSERT_EQ(std::system((std::string(TRAINSCOPE_SOURCE_DIR) + "/scripts/test-postgres.sh restart " + dir).c_str()), 0);
  WriteLoss(store.get(), 3000, 3000);
  store.reset();
  std::unique_ptr<RunStore> reader;
  ASSERT_TRUE(RunStore::OpenReadOnly(Location(project_, "run"), &reader).ok());
  std::vector<Point> points;
  ASSERT_TRUE(reader->ReadScalars("loss", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), 6000u);
  for (size_t i = 0; i < points.size(); ++i) ASSERT_EQ(points[i].step, static_cast<int64_t>(i));
}

TEST_F(PostgresStoreTest, LocationsNeedAProjectAndARunAndHideThePassword) {
  std::unique_ptr<RunStore> store;
  Status s = RunStore::OpenReadOnly("postgresql://alice:secret@127.0.0.1:1/db", &store);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("#project/run"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("secret"), std::string::npos) << s.message();
  s = RunStore::OpenReadOnly("postgresql://alice:secret@127.0.0.1:1/db#p/r", &store);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot connect"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("postgresql://alice@127.0.0.1:1/db"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("secret"), std::string::npos) << s.message();
}

TEST_F(PostgresStoreTest, AnOlderSchemaIsMigratedOnceInOrder) {
  Create(Location(project_, "run"));
  auto db = Connect();
  // Back to version 2, with compressed blobs, as a database of an older trainscope would be.
  ASSERT_TRUE(db->Exec("ALTER TABLE scalar_chunk ALTER COLUMN data SET STORAGE EXTENDED; "
                       "UPDATE trainscope_schema SET version = 2",
                       "test")
                  .ok());
  std::unique_ptr<RunStore> reader;
  ASSERT_TRUE(RunStore::OpenReadOnly(Location(project_, "run"), &reader).ok());
  PgResult rows;
  ASSERT_TRUE(db->Query("SELECT version::bigint, (SELECT count(*) FROM trainscope_schema) FROM trainscope_schema",
                        PgParams(), "test", &rows)
                  .ok());
  EXPECT_EQ(rows.Int(0, 0), KnownSchemaVersion());
  EXPECT_EQ(rows.Int(0, 1), 1);
  ASSERT_TRUE(db->Query("SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid WHERE a.attname = "
                        "'data' AND c.relname LIKE 'scalar_chunk%' AND a.attstorage <> 'e'",
                        PgParams(), "test", &rows)
                  .ok());
  EXPECT_EQ(rows.Int(0, 0), 0) << "every chunk table's blobs uncompressed after migration 3";
}

// A database made before a measured statistic existed (data/tensor_stats.json) gains its
// column when opened, without a schema version of its own; earlier rows read it as not
// measured and keep their checksums. Played with the table's last row's column dropped.
TEST_F(PostgresStoreTest, AMissingMeasuredColumnIsAddedAndReadsAsNotMeasured) {
  const tensor_stats::MeasuredStat& last = *tensor_stats::kMeasured[tensor_stats::kMeasuredCount - 1];
  const float values[] = {0.5f, -1.0f};
  {
    auto store = Create(Location(project_, "run"));
    int64_t id = 0;
    ASSERT_TRUE(store->EnsureSeries("act/fc", SeriesKind::kTensorStats, &id).ok());
    WriteBatch batch;
    batch.tensor_stats.push_back({id, 1, 5.0, ComputeTensorStats(values, 2, false)});
    ASSERT_TRUE(store->Write(batch).ok());
    ASSERT_TRUE(store->Close("finished", "").ok());
  }
  auto db = Connect();
  ASSERT_TRUE(db->Exec("ALTER TABLE tensor_stats DROP COLUMN " + std::string(last.name), "test").ok());
  std::unique_ptr<RunStore> reader;
  Status s = RunStore::OpenReadOnly(Location(project_, "run"), &reader);
  ASSERT_TRUE(s.ok()) << s.message();
  std::vector<TensorStatsPoint> points;
  ASSERT_TRUE(reader->ReadTensorStats("act/fc", 0, 10, &points).ok());
  ASSERT_EQ(points.size(), 1u);
  EXPECT_TRUE(std::isnan(points[0].stats.*last.field));
  EXPECT_EQ(points[0].stats.min, -1.0);
  EXPECT_EQ(reader->damage().count(), 0);
  PgResult rows;
  ASSERT_TRUE(db->Query("SELECT version::bigint FROM trainscope_schema", PgParams(), "test", &rows).ok());
  EXPECT_EQ(rows.Int(0, 0), KnownSchemaVersion());
}

}  // namespace
}  // namespace trainscope
