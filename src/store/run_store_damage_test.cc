// What a damaged or failing store keeps: real run files, damaged with bytes flipped, pages
// cut off and rows altered underneath the store, and writes that fail mid-transaction on a
// full file (SQLite's max_page_count) and on a value over SQLite's length limit. No mock of
// SQLite: every read and write goes through it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <sqlite3.h>

#include "store/run_io.h"
#include "store/run_store.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;

class StoreDamageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ts_damage_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// A value no other point has: its bytes locate the point in the file.
double ValueOf(int series, int64_t step) { return series * 1e6 + step + 0.25; }

// One full chunk (kChunkPoints points from `first`) per call: each becomes one row.
void AddChunk(WriteBatch* batch, int64_t id, int series, int64_t first, int64_t n = RunStore::kChunkPoints) {
  for (int64_t s = first; s < first + n; ++s) batch->scalars.push_back({id, s, 1000.0 + s, ValueOf(series, s)});
}

std::vector<int64_t> RowIds(const std::string& db_path, const char* sql) {
  sqlite3* db = nullptr;
  std::vector<int64_t> ids;
  EXPECT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  while (sqlite3_step(stmt) == SQLITE_ROW) ids.push_back(sqlite3_column_int64(stmt, 0));
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return ids;
}

void Sql(const std::string& db_path, const char* sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
  sqlite3_close(db);  // the last connection: the WAL goes back into the file
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

bool Reported(const DamageLog& log, const std::string& series, const std::string& table, int64_t rowid) {
  for (const DamagedRecord& r : log.records()) {
    if (r.series == series && r.table == table && r.rowid == rowid) return true;
  }
  return false;
}

void ExpectPoints(const std::vector<Point>& points, int series, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  size_t i = 0;
  for (const auto& [first, end] : ranges) {
    for (int64_t s = first; s < end; ++s, ++i) {
      ASSERT_LT(i, points.size()) << "series " << series << " ends before step " << s;
      ASSERT_EQ(points[i].step, s);
      ASSERT_EQ(points[i].value, ValueOf(series, s));
      ASSERT_DOUBLE_EQ(points[i].wall_time, 1000.0 + s);
    }
  }
  EXPECT_EQ(i, points.size()) << "series " << series << " has points it should not";
}

TEST_F(StoreDamageTest, FlippedBytesAndCutPagesAreReportedAndTheRestReadsBackExactly) {
  const std::string run = (dir_ / "run").string();
  int64_t a = 0, b = 0, c = 0, d = 0, grad = 0, vec = 0;
  {
    RunMeta meta;
    meta.name = "damaged";
    std::unique_ptr<RunStore> store;
    ASSERT_TRUE(RunStore::Create(run, meta, &store).ok());
    for (auto [tag, kind, id] : {std::tuple("a", SeriesKind::kScalar, &a), {"b", SeriesKind::kScalar, &b},
                                 {"c", SeriesKind::kScalar, &c}, {"d", SeriesKind::kScalar, &d},
                                 {"grad/w", SeriesKind::kTensorStats, &grad}, {"v", SeriesKind::kVector, &vec}}) {
      ASSERT_TRUE(store->EnsureSeries(tag, kind, id).ok());
    }
    WriteBatch batch;
    AddChunk(&batch, a, 1, 0);
    AddChunk(&batch, a, 1, 2048, 952);  // a full row and a partial one
    AddChunk(&batch, d, 4, 0, 10);
    for (int64_t s = 0; s < 20; ++s) {
      TensorStats t;
      t.numel = 100 + s;
      t.min = -1.0 - s;
      t.max = 1.0 + s;
      t.has_histogram = true;
      t.exponent_counts[60] = 7 + s;
      t.exponent_counts[64] = 9;
      batch.tensor_stats.push_back({grad, s, 1000.0 + s, t});
      batch.vectors.push_back({vec, s, 1000.0 + s, {float(s), 2.0f, 3.0f}});
    }
    ASSERT_TRUE(store->Write(batch).ok());
    for (int chunk = 0; chunk < 3; ++chunk) {  // b: three rows, written one by one
      WriteBatch one;
      AddChunk(&one, b, 2, chunk * 2048);
      ASSERT_TRUE(store->Write(one).ok());
    }
    for (int chunk = 0; chunk < 2; ++chunk) {  // c last: its pages are the file's last
      WriteBatch one;
      AddChunk(&one, c, 3, chunk * 2048);
      ASSERT_TRUE(store->Write(one).ok());
    }
    ASSERT_TRUE(store->Close("finished", "").ok());
  }
  const std::string db = (fs::path(run) / kStoreFileName).string();
  const auto b_rows = RowIds(db, ("SELECT id FROM scalar_chunk WHERE series_id=" + std::to_string(b) + " ORDER BY id").c_str());
  const auto c_rows = RowIds(db, ("SELECT id FROM scalar_chunk WHERE series_id=" + std::to_string(c) + " ORDER BY id").c_str());
  const auto d_rows = RowIds(db, ("SELECT id FROM scalar_chunk WHERE series_id=" + std::to_string(d)).c_str());
  const auto stats_rows = RowIds(db, "SELECT rowid FROM tensor_stats ORDER BY step");
  ASSERT_EQ(b_rows.size(), 3u);
  ASSERT_EQ(c_rows.size(), 2u);
  ASSERT_EQ(d_rows.size(), 1u);
  ASSERT_EQ(stats_rows.size(), 20u);

  // Rows altered underneath the store: a histogram cut by 3 bytes, a chunk whose count
  // disagrees with its blob.
  Sql(db, ("UPDATE tensor_stats SET histogram = substr(histogram, 1, length(histogram) - 3) WHERE rowid=" +
           std::to_string(stats_rows[5]))
              .c_str());
  Sql(db, ("UPDATE scalar_chunk SET count = 11 WHERE id=" + std::to_string(d_rows[0])).c_str());

  std::string bytes = ReadFile(db);
  const size_t page = 16384;
  ASSERT_EQ(bytes.size() % page, 0u);
  // Bytes flipped: the overflow page holding b's second chunk's value at step 3000 gets a
  // next-page pointer past the end of the file.
  const double probe = ValueOf(2, 3000);
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&probe), sizeof(probe)));
  ASSERT_NE(at, std::string::npos);
  const size_t page_start = at / page * page;
  for (size_t i = 0; i < 4; ++i) bytes[page_start + i] = static_cast<char>(bytes[page_start + i] ^ 0xff);
  // Pages cut off: the file loses its last page, the end of c's second chunk (its last
  // values sit in the page before, its wall-time offsets follow them).
  const double c_probe = ValueOf(3, 4095);
  ASSERT_GE(bytes.rfind(std::string(reinterpret_cast<const char*>(&c_probe), sizeof(c_probe))), bytes.size() - 2 * page);
  bytes.resize(bytes.size() - page);
  WriteFile(db, bytes);

  DamageLog log;
  std::unique_ptr<RunStore> reader;
  Status s = RunStore::OpenReadOnly(run, &reader, &log);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(Reported(log, "", "file", 0)) << log.Summary(20);

  std::vector<Point> points;
  ASSERT_TRUE(reader->ReadScalars("a", INT64_MIN, INT64_MAX, &points).ok());
  ExpectPoints(points, 1, {{0, 3000}});
  // b: the chunks before and after the damaged one are kept.
  s = reader->ReadScalars("b", INT64_MIN, INT64_MAX, &points);
  ASSERT_TRUE(s.ok()) << s.message();
  ExpectPoints(points, 2, {{0, 2048}, {4096, 6144}});
  EXPECT_TRUE(Reported(log, "b", "scalar_chunk", b_rows[1])) << log.Summary(20);
  ASSERT_TRUE(reader->ReadScalars("c", INT64_MIN, INT64_MAX, &points).ok());
  ExpectPoints(points, 3, {{0, 2048}});
  EXPECT_TRUE(Reported(log, "c", "scalar_chunk", c_rows[1])) << log.Summary(20);
  ASSERT_TRUE(reader->ReadScalars("d", INT64_MIN, INT64_MAX, &points).ok());
  EXPECT_TRUE(points.empty());
  EXPECT_TRUE(Reported(log, "d", "scalar_chunk", d_rows[0])) << log.Summary(20);

  // The row whose histogram was cut no longer matches its checksum: it is skipped and
  // reported (which of its values changed cannot be told), the other 19 read back exactly.
  std::vector<TensorStatsPoint> stats;
  ASSERT_TRUE(reader->ReadTensorStats("grad/w", INT64_MIN, INT64_MAX, &stats).ok());
  ASSERT_EQ(stats.size(), 19u);
  for (int64_t i = 0, k = 0; i < 20; ++i) {
    if (i == 5) continue;
    const TensorStatsPoint& p = stats[k++];
    EXPECT_EQ(p.step, i);
    EXPECT_EQ(p.stats.numel, uint64_t(100 + i));
    EXPECT_EQ(p.stats.max, 1.0 + i);
    EXPECT_TRUE(p.stats.has_histogram);
    EXPECT_EQ(p.stats.exponent_counts[60], uint64_t(7 + i));
  }
  EXPECT_TRUE(Reported(log, "grad/w", "tensor_stats", stats_rows[5])) << log.Summary(20);
  EXPECT_NE(log.Summary(20).find("checksum mismatch"), std::string::npos) << log.Summary(20);
  std::vector<VectorPoint> vectors;
  ASSERT_TRUE(reader->ReadVectors("v", INT64_MIN, INT64_MAX, &vectors).ok());
  ASSERT_EQ(vectors.size(), 20u);
  EXPECT_EQ(vectors[7].values, (std::vector<float>{7.0f, 2.0f, 3.0f}));
  // The first five records: the file, then b, c, d and the histogram, each once.
  EXPECT_EQ(log.count(), 5) << log.Summary(20);
  EXPECT_EQ(reader->damage().count(), log.count());

  // The whole-run read goes around the damage too, and counts it again.
  RunData data;
  s = ReadRun(*reader, &data);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(data.meta["name"], "damaged");
  ASSERT_NE(data.FindScalar("a"), nullptr);
  ASSERT_NE(data.FindScalar("b"), nullptr);
  EXPECT_EQ(data.FindScalar("a")->steps.size(), 3000u);
  EXPECT_EQ(data.FindScalar("b")->steps.size(), 4096u);
  EXPECT_GT(log.count(), 5);

  // What show, runs, report and the server ask: one whole read, its own count, the series named.
  DamageLog check;
  ASSERT_TRUE(CheckRun(run, &check).ok());
  EXPECT_GE(check.count(), 5) << check.Summary(20);  // the five above, and a summary that could not count c
  EXPECT_EQ(check.Series(), (std::vector<std::string>{"b", "c", "d", "grad/w"}));
  // And a whole store reads through without any.
  const std::string whole = (dir_ / "whole").string();
  {
    RunMeta meta;
    std::unique_ptr<RunStore> store;
    ASSERT_TRUE(RunStore::Create(whole, meta, &store).ok());
    int64_t id = 0;
    ASSERT_TRUE(store->EnsureSeries("a", SeriesKind::kScalar, &id).ok());
    WriteBatch batch;
    AddChunk(&batch, id, 1, 0, 100);
    ASSERT_TRUE(store->Write(batch).ok());
    ASSERT_TRUE(store->Close("finished", "").ok());
  }
  DamageLog none;
  ASSERT_TRUE(CheckRun(whole, &none).ok());
  EXPECT_EQ(none.count(), 0);
  EXPECT_TRUE(none.Series().empty());
}

// A value changed in the file (one byte of one stored float64, the blob's length intact) is
// caught by the chunk's checksum: the chunk is skipped and reported, its neighbours read back.
TEST_F(StoreDamageTest, AChangedValueIsCaughtByTheChecksum) {
  const std::string run = (dir_ / "run").string();
  int64_t a = 0;
  {
    RunMeta meta;
    std::unique_ptr<RunStore> store;
    ASSERT_TRUE(RunStore::Create(run, meta, &store).ok());
    ASSERT_TRUE(store->EnsureSeries("a", SeriesKind::kScalar, &a).ok());
    for (int chunk = 0; chunk < 3; ++chunk) {
      WriteBatch one;
      AddChunk(&one, a, 1, chunk * 2048);
      ASSERT_TRUE(store->Write(one).ok());
    }
    ASSERT_TRUE(store->Close("finished", "").ok());
  }
  const std::string db = (fs::path(run) / kStoreFileName).string();
  const auto rows = RowIds(db, "SELECT id FROM scalar_chunk ORDER BY id");
  ASSERT_EQ(rows.size(), 3u);
  // The middle chunk's 100th value gets one bit flipped (steps take the first 2048 x 8 bytes).
  {
    sqlite3* handle = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
    sqlite3_stmt* read = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(handle, "SELECT data FROM scalar_chunk WHERE id=?", -1, &read, nullptr), SQLITE_OK);
    sqlite3_bind_int64(read, 1, rows[1]);
    ASSERT_EQ(sqlite3_step(read), SQLITE_ROW);
    std::string data(static_cast<const char*>(sqlite3_column_blob(read, 0)), sqlite3_column_bytes(read, 0));
    sqlite3_finalize(read);
    data[2048 * 8 + 100 * 8 + 3] ^= 0x01;
    sqlite3_stmt* write = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(handle, "UPDATE scalar_chunk SET data=?1 WHERE id=?2", -1, &write, nullptr), SQLITE_OK);
    sqlite3_bind_blob(write, 1, data.data(), static_cast<int>(data.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(write, 2, rows[1]);
    ASSERT_EQ(sqlite3_step(write), SQLITE_DONE);
    sqlite3_finalize(write);
    sqlite3_close(handle);
  }
  DamageLog log;
  std::unique_ptr<RunStore> reader;
  ASSERT_TRUE(RunStore::OpenReadOnly(run, &reader, &log).ok());
  std::vector<Point> points;
  ASSERT_TRUE(reader->ReadScalars("a", INT64_MIN, INT64_MAX, &points).ok());
  ExpectPoints(points, 1, {{0, 2048}, {4096, 6144}});
  EXPECT_TRUE(Reported(log, "a", "scalar_chunk", rows[1])) << log.Summary(20);
  EXPECT_NE(log.Summary().find("checksum mismatch"), std::string::npos) << log.Summary();
}

// Stores written before the checksums (no crc columns) read as before, and a resumed run
// appends to them without checksums.
TEST_F(StoreDamageTest, AStoreFromBeforeTheChecksumsReadsAndAppends) {
  const std::string run = (dir_ / "run").string();
  int64_t a = 0, g = 0, v = 0;
  {
    RunMeta meta;
    std::unique_ptr<RunStore> store;
    ASSERT_TRUE(RunStore::Create(run, meta, &store).ok());
    ASSERT_TRUE(store->EnsureSeries("a", SeriesKind::kScalar, &a).ok());
    ASSERT_TRUE(store->EnsureSeries("g", SeriesKind::kTensorStats, &g).ok());
    ASSERT_TRUE(store->EnsureSeries("v", SeriesKind::kVector, &v).ok());
    ASSERT_TRUE(store->Close("finished", "").ok());
  }
  const std::string db = (fs::path(run) / kStoreFileName).string();
  Sql(db, "ALTER TABLE scalar_chunk DROP COLUMN crc; ALTER TABLE tensor_stats DROP COLUMN crc; "
          "ALTER TABLE vector DROP COLUMN crc;");
  for (int round = 0; round < 2; ++round) {  // written, then resumed
    std::unique_ptr<RunStore> store;
    ASSERT_TRUE(RunStore::OpenForWrite(run, &store).ok());
    WriteBatch batch;
    AddChunk(&batch, a, 1, round * 100, 100);
    TensorStats t;
    t.numel = 10;
    t.max = 2;
    batch.tensor_stats.push_back({g, round, 1000.0 + round, t});
    batch.vectors.push_back({v, round, 1000.0 + round, {1.0f, 2.0f}});
    ASSERT_TRUE(store->Write(batch).ok());
    ASSERT_TRUE(store->Close("finished", "").ok());
  }
  DamageLog log;
  ASSERT_TRUE(CheckRun(run, &log).ok());
  EXPECT_EQ(log.count(), 0) << log.Summary();
  std::unique_ptr<RunStore> reader;
  ASSERT_TRUE(RunStore::OpenReadOnly(run, &reader).ok());
  std::vector<Point> points;
  ASSERT_TRUE(reader->ReadScalars("a", INT64_MIN, INT64_MAX, &points).ok());
  ExpectPoints(points, 1, {{0, 200}});
  std::vector<TensorStatsPoint> stats;
  ASSERT_TRUE(reader->ReadTensorStats("g", INT64_MIN, INT64_MAX, &stats).ok());
  EXPECT_EQ(stats.size(), 2u);
  std::vector<VectorPoint> vectors;
  ASSERT_TRUE(reader->ReadVectors("v", INT64_MIN, INT64_MAX, &vectors).ok());
  EXPECT_EQ(vectors.size(), 2u);
}

// A writer that wrote on after EnsureSeries failed once handed the store an id it never
// gave (the recorder kept -1 for the series): the first point of that batch crashed the
// writer thread (SIGSEGV) through the chunk cache's "no series yet" sentinel.
TEST_F(StoreDamageTest, AWriteWithASeriesIdTheStoreNeverGaveIsRefusedWhole) {
  const std::string run = (dir_ / "run").string();
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::Create(run, RunMeta(), &store).ok());
  int64_t loss = 0;
  ASSERT_TRUE(store->EnsureSeries("train/loss", SeriesKind::kScalar, &loss).ok());
  WriteBatch good;
  AddChunk(&good, loss, 1, 0, 10);
  ASSERT_TRUE(store->Write(good).ok());
  for (int64_t bad : {int64_t{-1}, int64_t{0}}) {
    WriteBatch batch;
    batch.scalars.push_back({bad, 10, 0.0, 1.0});
    AddChunk(&batch, loss, 1, 11, 5);
    Status s = store->Write(batch);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(s.IsInvalidArgument()) << s.message();
    EXPECT_NE(s.message().find("series id " + std::to_string(bad)), std::string::npos) << s.message();
  }
  WriteBatch after;
  AddChunk(&after, loss, 1, 20, 5);
  ASSERT_TRUE(store->Write(after).ok());
  store.reset();
  std::unique_ptr<RunStore> reader;
  ASSERT_TRUE(RunStore::OpenReadOnly(run, &reader).ok());
  std::vector<Point> points;
  ASSERT_TRUE(reader->ReadScalars("train/loss", INT64_MIN, INT64_MAX, &points).ok());
  ExpectPoints(points, 1, {{0, 10}, {20, 25}});  // nothing of the refused batches
}

// A store that could not be laid down (here: its file may not grow past one page) leaves
// no empty file that a later `trainscope runs` would read as "schema version 0".
TEST_F(StoreDamageTest, AStoreThatCannotBeCreatedLeavesNothingBehind) {
  const std::string run = (dir_ / "unwritable").string();
  fs::create_directories(run);
  fs::permissions(run, fs::perms::owner_read | fs::perms::owner_exec, fs::perm_options::replace);
  if (::access(run.c_str(), W_OK) == 0) {
    fs::permissions(run, fs::perms::owner_all);
    GTEST_SKIP() << "running as root: a directory without write permission is still writable";
  }
  std::unique_ptr<RunStore> store;
  std::string fault;
  Status s = RunStore::Create(run, RunMeta(), &store, &fault);
  fs::permissions(run, fs::perms::owner_all);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.IsIOError()) << s.message();
  EXPECT_EQ(fault, "read-only");
  EXPECT_FALSE(fs::exists(fs::path(run) / kStoreFileName));
}

TEST_F(StoreDamageTest, AnEmptyStoreFileIsCalledEmptyNotAnotherSchema) {
  const std::string run = (dir_ / "empty").string();
  fs::create_directories(run);
  std::ofstream(fs::path(run) / kStoreFileName).close();
  std::unique_ptr<RunStore> reader;
  Status s = RunStore::OpenReadOnly(run, &reader);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("empty store (0 bytes)"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("schema version"), std::string::npos) << s.message();
}

TEST(StoreFaultCauseTest, NamesTheCauseTheUserCanAct) {
  EXPECT_EQ(StoreFaultCause(SQLITE_FULL, 0), "disk full");
  EXPECT_EQ(StoreFaultCause(SQLITE_IOERR_WRITE, ENOSPC), "disk full");
  EXPECT_EQ(StoreFaultCause(SQLITE_IOERR_WRITE, EFBIG), "disk full");
  EXPECT_EQ(StoreFaultCause(SQLITE_READONLY, 0), "read-only");
  EXPECT_EQ(StoreFaultCause(SQLITE_IOERR_WRITE, EROFS), "read-only");
  EXPECT_EQ(StoreFaultCause(SQLITE_READONLY_DBMOVED, 0), "store deleted");
  EXPECT_EQ(StoreFaultCause(SQLITE_BUSY, ENOSPC), "locked by another process");
  EXPECT_EQ(StoreFaultCause(SQLITE_IOERR_FSYNC, EIO), "I/O error");
}

TEST_F(StoreDamageTest, AFailingWriteMidTransactionKeepsThePreviousCommit) {
  const std::string run = (dir_ / "run").string();
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::Create(run, RunMeta(), &store).ok());
  int64_t loss = 0, big = 0, grad = 0;
  ASSERT_TRUE(store->EnsureSeries("train/loss", SeriesKind::kScalar, &loss).ok());
  ASSERT_TRUE(store->EnsureSeries("big", SeriesKind::kVector, &big).ok());
  ASSERT_TRUE(store->EnsureSeries("grad/w", SeriesKind::kTensorStats, &grad).ok());
  WriteBatch first;
  AddChunk(&first, loss, 1, 0, 100);
  for (int64_t s = 0; s < 5; ++s) first.tensor_stats.push_back({grad, s, 0.0, TensorStats()});
  Finding f;
  f.code = "LOSS_SPIKE";
  f.step = 50;
  first.findings.push_back(f);
  ASSERT_TRUE(store->Write(first).ok());

  // The file may not grow from here. The batch is written in order: the small row of new
  // loss points and the two statistics fit in their pages and are written; the 40 KB
  // vector after them needs new pages and fails: mid-transaction.
  ASSERT_TRUE(store->LimitFileSize(1).ok());
  WriteBatch second;
  AddChunk(&second, loss, 1, 100, 5);
  for (int64_t s = 5; s < 7; ++s) second.tensor_stats.push_back({grad, s, 0.0, TensorStats()});
  second.vectors.push_back({big, 100, 0.0, std::vector<float>(10000, 1.5f)});
  second.findings.push_back(f);
  Status s = store->Write(second);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.IsIOError()) << StatusCodeName(s.code()) << ": " << s.message();
  EXPECT_NE(s.message().find(store->path()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("full"), std::string::npos) << s.message();

  // A full disk makes SQLite roll the transaction back itself. A failing statement that
  // leaves it open (a value over SQLite's length limit) is rolled back by the store.
  ASSERT_TRUE(store->LimitFileSize(int64_t(1) << 40).ok());
  store->LimitValueSize(10000);  // the small loss row passes, the 40 KB vector does not
  s = store->Write(second);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.IsInvalidArgument()) << StatusCodeName(s.code()) << ": " << s.message();
  EXPECT_NE(s.message().find("write vector"), std::string::npos) << s.message();
  store->LimitValueSize(1 << 30);

  // The store goes on writing after the failures.
  WriteBatch third;
  AddChunk(&third, loss, 1, 200, 3);
  ASSERT_TRUE(store->Write(third).ok());
  store.reset();

  DamageLog log;
  std::unique_ptr<RunStore> reader;
  ASSERT_TRUE(RunStore::OpenReadOnly(run, &reader, &log).ok());
  std::vector<Point> points;
  ASSERT_TRUE(reader->ReadScalars("train/loss", INT64_MIN, INT64_MAX, &points).ok());
  ExpectPoints(points, 1, {{0, 100}, {200, 203}});  // nothing of the failed batch
  std::vector<VectorPoint> vectors;
  ASSERT_TRUE(reader->ReadVectors("big", INT64_MIN, INT64_MAX, &vectors).ok());
  EXPECT_TRUE(vectors.empty());
  std::vector<TensorStatsPoint> stats;
  ASSERT_TRUE(reader->ReadTensorStats("grad/w", INT64_MIN, INT64_MAX, &stats).ok());
  EXPECT_EQ(stats.size(), 5u);
  std::vector<Finding> findings;
  ASSERT_TRUE(reader->ReadFindings(&findings).ok());
  EXPECT_EQ(findings.size(), 1u);
  // An intact file: nothing to report.
  EXPECT_EQ(log.count(), 0) << log.Summary(20);
}

TEST_F(StoreDamageTest, ErrorsHaveKinds) {
  std::unique_ptr<RunStore> store;
  Status s = RunStore::OpenReadOnly((dir_ / "none").string(), &store);
  EXPECT_TRUE(s.IsNotFound()) << s.message();
  ASSERT_TRUE(RunStore::Create((dir_ / "run").string(), RunMeta(), &store).ok());
  int64_t id = 0;
  ASSERT_TRUE(store->EnsureSeries("x", SeriesKind::kScalar, &id).ok());
  s = store->EnsureSeries("x", SeriesKind::kTensorStats, &id);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.message();
  std::vector<Point> points;
  s = store->ReadScalars("nope", 0, 10, &points);
  EXPECT_TRUE(s.IsNotFound()) << s.message();
  EXPECT_NE(s.message().find("no series 'nope'"), std::string::npos);
  s = RunStore::Create((dir_ / "run").string(), RunMeta(), &store);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.message();
  // Not a store: a file of other bytes.
  fs::create_directories(dir_ / "junk");
  WriteFile((dir_ / "junk" / kStoreFileName).string(), std::string(4096, 'x'));
  s = RunStore::OpenReadOnly((dir_ / "junk").string(), &store);
  EXPECT_TRUE(s.IsCorruption()) << StatusCodeName(s.code()) << ": " << s.message();
}

}  // namespace
}  // namespace trainscope
