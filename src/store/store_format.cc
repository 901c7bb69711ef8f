#include "store/store_format.h"

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

namespace trainscope {

std::string FormatMetaDouble(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", v);
  return buffer;
}

double WallClockNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

RowCrc& RowCrc::Int(int64_t v) { return Bytes(&v, sizeof(v)); }

RowCrc& RowCrc::Real(double v) {
  // As the value reads back: SQLite stores NaN as NULL (read as NaN) and -0.0 as 0.
  if (std::isnan(v)) v = std::numeric_limits<double>::quiet_NaN();
  if (v == 0) v = 0;
  return Bytes(&v, sizeof(v));
}

RowCrc& RowCrc::Bytes(const void* data, size_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  // zlib's crc32 takes a uInt length: feed it in pieces.
  while (bytes > 0) {
    const uInt n = static_cast<uInt>(std::min<size_t>(bytes, 1u << 30));
    crc_ = crc32(crc_, p, n);
    p += n;
    bytes -= n;
  }
  return *this;
}

std::string CrcMismatch(uint32_t stored, const RowCrc& computed) {
  if (stored == computed.value()) return {};
  char text[64];
  std::snprintf(text, sizeof(text), "checksum mismatch (CRC-32 %08x, stored %08x)", computed.value(), stored);
  return std::string(text) + ": the row's values changed after they were written";
}

std::string CheckChunk(int64_t n, double base_time, const unsigned char* data, int64_t bytes,
                       const uint32_t* stored_crc, ChunkView* view) {
  if (n < 0 || n > RunStore::kChunkPoints || bytes != n * kChunkPointBytes || (n > 0 && !data)) {
    return "chunk of " + std::to_string(n) + " points holds " + std::to_string(bytes) + " bytes, expected " +
           std::to_string(kChunkPointBytes) + " per point and at most " + std::to_string(RunStore::kChunkPoints) +
           " points";
  }
  if (stored_crc) {
    std::string wrong =
        CrcMismatch(*stored_crc, RowCrc().Int(n).Real(base_time).Bytes(data, static_cast<size_t>(bytes)));
    if (!wrong.empty()) return wrong;
  }
  *view = ChunkView{data, data + n * sizeof(int64_t), data + n * (sizeof(int64_t) + sizeof(double)), n, base_time};
  return {};
}

std::string EncodeHistogram(const TensorStats& s) {
  int first = -1, last = -1;
  for (int i = 0; i < TensorStats::kExponentBins; ++i) {
    if (s.exponent_counts[i]) {
      if (first < 0) first = i;
      last = i;
    }
  }
  std::string blob(1, static_cast<char>(first < 0 ? 0 : first));
  if (first >= 0) {
    blob.resize(1 + (last - first + 1) * sizeof(uint64_t));
    std::memcpy(blob.data() + 1, &s.exponent_counts[first], (last - first + 1) * sizeof(uint64_t));
  }
  return blob;
}

std::string DecodeHistogram(const unsigned char* blob, int64_t bytes, TensorStats* s) {
  constexpr int64_t kBin = sizeof(uint64_t);
  if (bytes < 1 || (bytes - 1) % kBin != 0) {
    return "histogram of " + std::to_string(bytes) + " bytes, expected 1 + 8 x bins (cut short?)";
  }
  const int64_t first = blob[0];
  const int64_t count = (bytes - 1) / kBin;
  if (first + count > TensorStats::kExponentBins) {
    return "histogram of " + std::to_string(count) + " bins from bin " + std::to_string(first) + ", expected at most " +
           std::to_string(TensorStats::kExponentBins) + " bins in all";
  }
  s->has_histogram = true;
  for (int64_t i = 0; i < count; ++i) s->exponent_counts[first + i] = LoadUnaligned<uint64_t>(blob + 1 + i * kBin);
  return {};
}

std::string MeasuredColumnList(std::string_view prefix) {
  std::string list;
  for (const tensor_stats::MeasuredStat* stat : tensor_stats::kMeasured) {
    if (!list.empty()) list += ", ";
    list += std::string(prefix) + std::string(stat->name);
  }
  return list;
}

RowCrc StatsCrc(int64_t step, double wall_time, const TensorStats& t) {
  RowCrc crc;
  crc.Int(step).Real(wall_time);
  crc.Int(static_cast<int64_t>(t.numel)).Int(static_cast<int64_t>(t.nan)).Int(static_cast<int64_t>(t.inf));
  crc.Int(static_cast<int64_t>(t.zeros)).Real(t.min).Real(t.max).Real(t.sum).Real(t.sum_squares);
  crc.Real(t.abs_max);
  for (const tensor_stats::MeasuredStat* stat : tensor_stats::kMeasured) {
    const double value = t.*stat->field;
    if (stat->first_schema || !std::isnan(value)) crc.Real(value);
  }
  return crc;
}

RowCrc VectorCrc(int64_t step, double wall_time, const void* data, size_t bytes) {
  return RowCrc().Int(step).Real(wall_time).Bytes(data, bytes);
}

// ---- chunking ----

ChunkRow ScalarChunker::Row(int64_t series_id, const OpenChunk& c, size_t begin) {
  const size_t n = c.steps.size() - begin;
  ChunkRow row;
  row.series_id = series_id;
  row.count = static_cast<int64_t>(n);
  row.data.assign(n * kChunkPointBytes, '\0');
  char* p = row.data.data();
  std::memcpy(p, c.steps.data() + begin, n * sizeof(int64_t));
  std::memcpy(p + n * sizeof(int64_t), c.values.data() + begin, n * sizeof(double));
  std::memcpy(p + n * (sizeof(int64_t) + sizeof(double)), c.offsets.data() + begin, n * sizeof(float));
  const auto [min_it, max_it] = std::minmax_element(c.steps.begin() + begin, c.steps.end());
  row.min_step = *min_it;
  row.max_step = *max_it;
  row.last_step = c.steps.back();
  row.last_value = c.values.back();
  row.base_time = c.base_time;
  row.crc = RowCrc().Int(row.count).Real(row.base_time).Bytes(row.data.data(), row.data.size()).value();
  return row;
}

Status ScalarChunker::WriteFull(int64_t series_id, OpenChunk* c, ChunkTable* table) {
  int64_t id = 0;
  Status s = table->InsertChunk(Row(series_id, *c, 0), &id);
  if (!s.ok()) return s;
  if (!c->partial_rows.empty()) {
    s = table->DeleteChunks(c->partial_rows);
    if (!s.ok()) return s;
  }
  const int64_t last_step = c->last_step;
  *c = OpenChunk();
  c->has_last_step = true;
  c->last_step = last_step;
  return Status::Ok();
}

Status ScalarChunker::WritePartial(ChunkTable* table) {
  for (auto& [id, c] : open_) {
    if (c->written == c->steps.size()) continue;
    int64_t row_id = 0;
    Status s = table->InsertChunk(Row(id, *c, c->written), &row_id);
    if (!s.ok()) return s;
    c->partial_rows.push_back(row_id);
    c->written = c->steps.size();
  }
  return Status::Ok();
}

Status ScalarChunker::Add(const std::vector<WriteBatch::ScalarPoint>& points, ChunkTable* table) {
  OpenChunk* chunk = nullptr;
  int64_t chunk_series = 0;
  for (const auto& p : points) {
    if (chunk == nullptr || p.series_id != chunk_series) {
      auto& slot = open_[p.series_id];
      if (!slot) slot = std::make_unique<OpenChunk>();
      chunk = slot.get();
      chunk_series = p.series_id;
    }
    if (chunk->has_last_step && p.step < chunk->last_step) ++backward_steps_;
    chunk->has_last_step = true;
    chunk->last_step = p.step;
    if (chunk->steps.empty()) chunk->base_time = p.wall_time;
    chunk->steps.push_back(p.step);
    chunk->values.push_back(p.value);
    chunk->offsets.push_back(static_cast<float>(p.wall_time - chunk->base_time));
    if (chunk->steps.size() == static_cast<size_t>(RunStore::kChunkPoints)) {
      Status s = WriteFull(p.series_id, chunk, table);
      if (!s.ok()) return s;
    }
  }
  return WritePartial(table);
}

// ---- decimation ----

// Bucket width in steps, rounded up so `buckets` buckets cover the range: the ceiling of
// (span_less_one + 1) / buckets, in a form that cannot overflow, since the range may span
// the whole int64 line (2^64 steps, one more than a uint64_t holds; chunks of a damaged
// file may claim that). Only one bucket over the whole line overflows: it gets the largest
// width, and the bucket index is capped.
BucketFiller::BucketFiller(size_t buckets, int64_t step_min, int64_t step_max)
    : step_min_(step_min), step_max_(step_max) {
  const uint64_t span_less_one = static_cast<uint64_t>(step_max) - static_cast<uint64_t>(step_min);
  width_ = span_less_one / buckets + 1;
  if (width_ == 0) width_ = std::numeric_limits<uint64_t>::max();
  const size_t used = static_cast<size_t>(std::min<uint64_t>(span_less_one / width_ + 1, buckets));
  constexpr double kInf = std::numeric_limits<double>::infinity();
  all_.resize(used);
  for (size_t b = 0; b < used; ++b) {
    all_[b] = Bucket{static_cast<int64_t>(static_cast<uint64_t>(step_min) + b * width_),
                     static_cast<int64_t>(static_cast<uint64_t>(step_min) + (b + 1) * width_),
                     0, kInf, -kInf, 0, 0, 0, 0};
  }
}

void BucketFiller::Add(const ChunkView& chunk) {
  const size_t last_bucket = all_.size() - 1;
  for (int64_t i = 0; i < chunk.n; ++i) {
    const int64_t step = chunk.Step(i);
    if (step < step_min_ || step > step_max_) continue;
    const double v = chunk.Value(i);
    const uint64_t index = (static_cast<uint64_t>(step) - static_cast<uint64_t>(step_min_)) / width_;
    Bucket& b = all_[std::min<uint64_t>(index, last_bucket)];
    ++b.count;
    if (std::isfinite(v)) {
      b.min = std::min(b.min, v);
      b.max = std::max(b.max, v);
    } else {
      ++b.nonfinite;
    }
    b.last = v;
    b.last_step = step;
    b.last_wall_time = chunk.WallTime(i);
  }
}

std::vector<Bucket> BucketFiller::Take() {
  std::vector<Bucket> out;
  for (Bucket& b : all_) {
    if (b.count == 0) continue;
    if (b.count == b.nonfinite) b.min = b.max = std::numeric_limits<double>::quiet_NaN();
    out.push_back(b);
  }
  return out;
}

}  // namespace trainscope
