// The record formats every RunStore backend stores alike: scalar chunks, exponent histograms
// and row checksums, and the chunking of scalar series (ScalarChunker). A run copied from
// SQLite to PostgreSQL keeps the same bytes, and the same checks catch the same damage.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/sample.h"
#include "core/status.h"
#include "store/run_store.h"

namespace trainscope {

template <class T>
T LoadUnaligned(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// "%.17g": the text form of doubles in the meta table, exact on the way back.
std::string FormatMetaDouble(double v);
double WallClockNow();

// ---- scalar chunks ----
// A chunk's data: int64 steps[n], float64 values[n], float32 wall-time offsets from the
// chunk's base_time[n], little-endian.
inline constexpr int64_t kChunkPointBytes = sizeof(int64_t) + sizeof(double) + sizeof(float);

// One chunk as stored.
struct ChunkRow {
  int64_t series_id = 0;
  int64_t count = 0;
  int64_t min_step = 0;
  int64_t max_step = 0;
  int64_t last_step = 0;
  double last_value = 0;
  double base_time = 0;
  std::string data;
  uint32_t crc = 0;  // RowCrc of count, base_time and data
};

// A stored chunk's arrays, read in place.
struct ChunkView {
  const unsigned char* steps;
  const unsigned char* values;
  const unsigned char* offsets;
  int64_t n;
  double base_time;
  int64_t Step(int64_t i) const { return LoadUnaligned<int64_t>(steps + i * 8); }
  double Value(int64_t i) const { return LoadUnaligned<double>(values + i * 8); }
  double WallTime(int64_t i) const { return base_time + LoadUnaligned<float>(offsets + i * 4); }
};

// Checks a stored chunk (its size, and its checksum where it has one) and gives its view.
// Returns what is wrong with a damaged one, empty when it reads.
std::string CheckChunk(int64_t count, double base_time, const unsigned char* data, int64_t bytes,
                       const uint32_t* stored_crc, ChunkView* view);

// What is wrong with a row whose stored checksum is not that of the values read: empty when
// it matches.
std::string CrcMismatch(uint32_t stored, const RowCrc& computed);

// ---- tensor statistics ----
// The histogram blob: uint8 first bin, then uint64 counts up to the last non-zero bin.
std::string EncodeHistogram(const TensorStats& s);
// Reads a histogram written by EncodeHistogram. A blob of another shape (cut short, or
// reaching past the last bin) leaves the stats without a histogram and says why: a part of
// the counts would misstate every fraction computed from them.
std::string DecodeHistogram(const unsigned char* blob, int64_t bytes, TensorStats* s);
// The measured statistics' columns of tensor_stats (data/tensor_stats.json), in the
// table's order, each after `prefix` and joined by ", ".
std::string MeasuredColumnList(std::string_view prefix = "");
// The checksum of a tensor_stats row's step, wall time and statistics, as they read back
// (the histogram's bytes are added by the caller).
RowCrc StatsCrc(int64_t step, double wall_time, const TensorStats& t);
// The checksum of a vector row.
RowCrc VectorCrc(int64_t step, double wall_time, const void* data, size_t bytes);

// ---- chunking ----
// Where ScalarChunker puts its rows: a backend's table of chunks.
class ChunkTable {
 public:
  virtual ~ChunkTable() = default;
  virtual Status InsertChunk(const ChunkRow& row, int64_t* id) = 0;
  virtual Status DeleteChunks(const std::vector<int64_t>& ids) = 0;
};

// Each write adds the new points of a series as one small row; when a series has
// RunStore::kChunkPoints points, they become one full row that replaces the small ones, in
// the same transaction, so a reader sees either the parts or the whole, never both.
class ScalarChunker {
 public:
  // Adds the points (usually grouped by series) and writes the rows this makes.
  Status Add(const std::vector<WriteBatch::ScalarPoint>& points, ChunkTable* table);
  // Writes the points of each open chunk not yet in the table, one small row per series.
  Status WritePartial(ChunkTable* table);
  // After a failed transaction: buffered chunks may hold points of the failed batch, and ids
  // of partial rows the rollback took back; start clean so nothing is written twice or
  // deleted by mistake.
  void Forget() { open_.clear(); }
  // Points whose step went backwards in their series, since this writer opened.
  int64_t backward_steps() const { return backward_steps_; }
  void set_backward_steps(int64_t n) { backward_steps_ = n; }

 private:
  struct OpenChunk {
    double base_time = 0;
    std::vector<int64_t> steps;
    std::vector<double> values;
    std::vector<float> offsets;
    size_t written = 0;                 // points already in partial rows
    std::vector<int64_t> partial_rows;  // ids of those rows, replaced when the chunk fills
    // The series' last step, across chunks, to count steps that go backwards.
    bool has_last_step = false;
    int64_t last_step = 0;
  };
  static ChunkRow Row(int64_t series_id, const OpenChunk& chunk, size_t begin);
  Status WriteFull(int64_t series_id, OpenChunk* chunk, ChunkTable* table);

  std::unordered_map<int64_t, std::unique_ptr<OpenChunk>> open_;
  int64_t backward_steps_ = 0;
};

// Buckets the points of one scalar series' chunks (visited through `visit_chunks`) over
// [step_min, step_max] into at most `buckets` buckets of equal step width; empty buckets
// are left out.
class BucketFiller {
 public:
  BucketFiller(size_t buckets, int64_t step_min, int64_t step_max);
  void Add(const ChunkView& chunk);
  std::vector<Bucket> Take();

 private:
  int64_t step_min_, step_max_;
  uint64_t width_;
  std::vector<Bucket> all_;
};

}  // namespace trainscope
