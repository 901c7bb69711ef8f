#include "server/ingest.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/base64.h"
#include "store/json_forms.h"
#include "store/postgres_run_store.h"
#include "store/store_format.h"

namespace trainscope::server {

namespace {

using json = nlohmann::json;
using StreamPositions = PostgresRunStore::StreamPositions;

// Writers kept open between batches (a run's chunker and connection), at most this many.
constexpr size_t kMaxWriters = 256;

ApiReply Reply(int status, const json& body) {
  return {status, body.dump(-1, ' ', false, json::error_handler_t::replace)};
}
ApiReply Error(int status, const std::string& message) { return Reply(status, {{"error", message}}); }

// A number as the forwarder writes it: JSON numbers, and "nan", "inf", "-inf" for what JSON
// cannot spell.
bool Number(const json& j, double* out) {
  if (j.is_number()) {
    *out = j.get<double>();
    return true;
  }
  if (!j.is_string()) return false;
  const std::string& s = j.get_ref<const std::string&>();
  if (s == "nan") *out = std::numeric_limits<double>::quiet_NaN();
  else if (s == "inf") *out = std::numeric_limits<double>::infinity();
  else if (s == "-inf") *out = -std::numeric_limits<double>::infinity();
  else return false;
  return true;
}

bool Int(const json& j, int64_t* out) {
  if (!j.is_number_integer()) return false;
  *out = j.get<int64_t>();
  return true;
}

bool FromHex(const std::string& hex, std::string* out) {
  if (hex.size() % 2) return false;
  out->resize(hex.size() / 2);
  for (size_t i = 0; i < out->size(); ++i) {
    int v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = hex[2 * i + k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + d;
    }
    (*out)[i] = static_cast<char>(v);
  }
  return true;
}

// Reads one batch into `batch`, keeping only what the run does not hold yet, and sets the
// positions after it. A malformed batch is InvalidArgument naming the place; a batch past a
// gap is FailedPrecondition-like: NotFound with "gap" (409 to the client).
class BatchReader {
 public:
  BatchReader(const json& body, RunStore* store) : body_(body), store_(store) {}

  Status Read(const StreamPositions& held, WriteBatch* batch, StreamPositions* after) {
    Status s = Scalars(held, batch, after);
    if (s.ok()) s = Rows("tensor_stats", held, after, [&](const json& r, int64_t) { return StatsRow(r, batch); });
    if (s.ok()) s = Rows("vectors", held, after, [&](const json& r, int64_t) { return VectorRow(r, batch); });
    if (s.ok()) s = Rows("spans", held, after, [&](const json& r, int64_t) { return SpanRow(r, batch); });
    if (s.ok() && body_.contains("findings")) {
      if (!body_["findings"].is_array()) return Bad("\"findings\": expected an array");
      for (size_t i = 0; i < body_["findings"].size(); ++i) {
        Finding finding;
        s = FindingFromJson(body_["findings"][i], FindingFields::kComplete, &finding);
        if (!s.ok()) return Bad("\"findings\"[" + std::to_string(i) + "]: " + s.message());
        batch->findings.push_back(std::move(finding));
      }
    }
    if (s.ok() && body_.contains("meta")) {
      if (!body_["meta"].is_object()) return Bad("\"meta\": expected an object of strings");
      for (const auto& [key, value] : body_["meta"].items()) {
        if (!value.is_string()) return Bad("\"meta\".\"" + key + "\": expected a string");
        s = store_->SetMetaValue(key, value.get<std::string>());
        if (!s.ok()) return s;
      }
    }
    return s;
  }
  bool gap() const { return gap_; }

 private:
  Status Bad(const std::string& what) { return Status::InvalidArgument("ingest batch: " + what); }

  int64_t Series(const std::string& tag, SeriesKind kind, Status* s) {
    int64_t id = 0;
    *s = store_->EnsureSeries(tag, kind, &id);
    return id;
  }

  // A series' points packed (base64 of int64 steps[n], float64 wall_times[n], float64
  // values[n], little-endian): a point in 32 characters instead of a JSON array of three
  // numbers, and no number to parse.
  bool Packed(const json& packed, std::vector<WriteBatch::ScalarPoint>* points, int64_t id) {
    std::string bytes;
    if (!packed.is_string() || !Base64Decode(packed.get_ref<const std::string&>(), &bytes) || bytes.size() % 24) {
      return false;
    }
    const size_t n = bytes.size() / 24;
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    for (size_t i = 0; i < n; ++i) {
      points->push_back({id, LoadUnaligned<int64_t>(p + 8 * i), LoadUnaligned<double>(p + 8 * (n + i)),
                         LoadUnaligned<double>(p + 8 * (2 * n + i))});
    }
    return true;
  }

  // "scalars": {"TAG": {"from": N, "points": [[step, wall_time, value], ...]}} or
  // {"from": N, "packed": "..."} (Packed)
  Status Scalars(const StreamPositions& held, WriteBatch* batch, StreamPositions* after) {
    if (!body_.contains("scalars")) return Status::Ok();
    if (!body_["scalars"].is_object()) return Bad("\"scalars\": expected an object by tag");
    for (const auto& [tag, entry] : body_["scalars"].items()) {
      int64_t from = 0;
      const bool packed = entry.is_object() && entry.contains("packed");
      if (!entry.is_object() || !Int(entry.value("from", json()), &from) || from < 0 ||
          (!packed && (!entry.contains("points") || !entry["points"].is_array()))) {
        return Bad("\"scalars\".\"" + tag + "\": expected {\"from\": N, \"points\": [[step, wall_time, value], ...]}");
      }
      const std::string stream = "scalar:" + tag;
      auto it = held.find(stream);
      const int64_t have = it == held.end() ? 0 : it->second;
      if (from > have) {
        gap_ = true;
        return Status::NotFound("ingest batch: gap in '" + tag + "': the batch starts at point " +
                                std::to_string(from) + ", the run holds " + std::to_string(have));
      }
      Status s;
      const int64_t id = Series(tag, SeriesKind::kScalar, &s);
      if (!s.ok()) return s;
      if (packed) {
        std::vector<WriteBatch::ScalarPoint> unpacked;
        if (!Packed(entry["packed"], &unpacked, id)) {
          return Bad("\"scalars\".\"" + tag + "\".\"packed\": expected base64 of 24 bytes a point");
        }
        const auto skip = static_cast<size_t>(have - from);
        if (skip < unpacked.size()) batch->scalars.insert(batch->scalars.end(), unpacked.begin() + skip, unpacked.end());
        (*after)[stream] = std::max<int64_t>(have, from + static_cast<int64_t>(unpacked.size()));
        continue;
      }
      const json& points = entry["points"];
      for (size_t i = static_cast<size_t>(have - from); i < points.size(); ++i) {
        const json& p = points[i];
        int64_t step = 0;
        double wall = 0, value = 0;
        if (!p.is_array() || p.size() != 3 || !Int(p[0], &step) || !Number(p[1], &wall) || !Number(p[2], &value)) {
          return Bad("\"scalars\".\"" + tag + "\" point " + std::to_string(i) + ": expected [step, wall_time, value]");
        }
        batch->scalars.push_back({id, step, wall, value});
      }
      (*after)[stream] = std::max<int64_t>(have, from + static_cast<int64_t>(points.size()));
    }
    return Status::Ok();
  }

  // "NAME": [[row_id, ...], ...] in row id order; rows the run holds are skipped.
  template <class Row>
  Status Rows(const char* name, const StreamPositions& held, StreamPositions* after, Row&& row) {
    if (!body_.contains(name)) return Status::Ok();
    const json& rows = body_[name];
    if (!rows.is_array()) return Bad(std::string("\"") + name + "\": expected an array of rows");
    const std::string stream = name;
    auto it = held.find(stream);
    int64_t last = it == held.end() ? 0 : it->second;
    for (size_t i = 0; i < rows.size(); ++i) {
      int64_t row_id = 0;
      if (!rows[i].is_array() || rows[i].empty() || !Int(rows[i][0], &row_id)) {
        return Bad(std::string("\"") + name + "\" row " + std::to_string(i) + ": expected [row_id, ...]");
      }
      if (row_id <= last) continue;
      Status s = row(rows[i], row_id);
      if (!s.ok()) return s.IsInvalidArgument() ? Bad(std::string("\"") + name + "\" row " + std::to_string(i) + ": " + s.message()) : s;
      last = row_id;
    }
    if (last > 0) (*after)[stream] = last;
    return Status::Ok();
  }

  // [row_id, tag, step, wall, numel, nan, inf, zeros, min, max, sum, sum_squares, abs_max,
  //  the first schema's measured statistics (dead_fraction, saturated_fraction), histogram hex
  //  or null, then the measured statistics added since, each optional (data/tensor_stats.json):
  //  a forwarder that predates one sends the row without it.
  Status StatsRow(const json& r, WriteBatch* batch) {
    const size_t first = tensor_stats::FirstSchemaCount(), later = tensor_stats::kMeasuredCount - first;
    const size_t histogram = 13 + first;
    TensorStatsPoint p;
    int64_t counts[4];
    double reals[5];
    if (r.size() < histogram + 1 || r.size() > histogram + 1 + later || !r[1].is_string() || !Int(r[2], &p.step) ||
        !Number(r[3], &p.wall_time)) {
      const std::string fields = std::to_string(histogram + 1) + (later ? " to " + std::to_string(histogram + 1 + later) : "");
      return Status::InvalidArgument("expected " + fields + " fields: row_id, tag, step, wall_time, 4 counts, " +
                                     std::to_string(5 + first) + " statistics, histogram" +
                                     (later ? ", the statistics measured since" : ""));
    }
    for (int k = 0; k < 4; ++k) {
      if (!Int(r[4 + k], &counts[k]) || counts[k] < 0) return Status::InvalidArgument("counts: expected integers >= 0");
    }
    for (int k = 0; k < 5; ++k) {
      if (!Number(r[8 + k], &reals[k])) return Status::InvalidArgument("statistics: expected numbers");
    }
    TensorStats& t = p.stats;
    t.numel = counts[0], t.nan = counts[1], t.inf = counts[2], t.zeros = counts[3];
    t.min = reals[0], t.max = reals[1], t.sum = reals[2], t.sum_squares = reals[3], t.abs_max = reals[4];
    for (size_t m = 0; m < tensor_stats::kMeasuredCount; ++m) {
      const size_t at = m < first ? 13 + m : histogram + 1 + (m - first);
      if (at >= r.size()) break;
      if (!Number(r[at], &(t.*tensor_stats::kMeasured[m]->field))) {
        return Status::InvalidArgument("statistics: expected numbers");
      }
    }
    if (!r[histogram].is_null()) {
      std::string blob;
      if (!r[histogram].is_string() || !FromHex(r[histogram].get<std::string>(), &blob) ||
          !DecodeHistogram(reinterpret_cast<const unsigned char*>(blob.data()), static_cast<int64_t>(blob.size()), &t)
               .empty()) {
        return Status::InvalidArgument("histogram: expected the store's histogram bytes in hex");
      }
    }
    Status s;
    const int64_t id = Series(r[1].get<std::string>(), SeriesKind::kTensorStats, &s);
    if (!s.ok()) return s;
    batch->tensor_stats.push_back({id, p.step, p.wall_time, t});
    return Status::Ok();
  }

  // [row_id, tag, step, wall, [values]]
  Status VectorRow(const json& r, WriteBatch* batch) {
    WriteBatch::VectorRecord v;
    if (r.size() != 5 || !r[1].is_string() || !Int(r[2], &v.step) || !Number(r[3], &v.wall_time) || !r[4].is_array()) {
      return Status::InvalidArgument("expected [row_id, tag, step, wall_time, [values]]");
    }
    for (const json& x : r[4]) {
      double value = 0;
      if (!Number(x, &value)) return Status::InvalidArgument("values: expected numbers");
      v.values.push_back(static_cast<float>(value));
    }
    Status s;
    v.series_id = Series(r[1].get<std::string>(), SeriesKind::kVector, &s);
    if (!s.ok()) return s;
    batch->vectors.push_back(std::move(v));
    return Status::Ok();
  }

  // [row_id, step, phase, start, duration]
  Status SpanRow(const json& r, WriteBatch* batch) {
    Span span;
    if (r.size() != 5 || !Int(r[1], &span.step) || !r[2].is_string() || !Number(r[3], &span.start) ||
        !Number(r[4], &span.duration)) {
      return Status::InvalidArgument("expected [row_id, step, phase, start, duration]");
    }
    span.phase = r[2].get<std::string>();
    batch->spans.push_back(std::move(span));
    return Status::Ok();
  }

  const json& body_;
  RunStore* store_;
  bool gap_ = false;
};

json PositionsJson(const StreamPositions& positions) {
  json out = json::object();
  for (const auto& [stream, position] : positions) out[stream] = position;
  return out;
}

}  // namespace

Status Ingest::WriterFor(const std::string& project, const std::string& run, std::shared_ptr<Writer>* out) {
  const std::string key = project + "/" + run;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = writers_.find(key);
  if (it != writers_.end()) {
    *out = it->second;
    return Status::Ok();
  }
  auto writer = std::make_shared<Writer>();
  const std::string location = database_ + "#" + key;
  Status s = RunStore::OpenForWrite(location, &writer->store);
  if (s.IsNotFound()) {
    RunMeta meta;
    meta.name = run;
    s = RunStore::Create(location, meta, &writer->store);
    // Another server made it meanwhile: open theirs.
    if (s.IsInvalidArgument()) s = RunStore::OpenForWrite(location, &writer->store);
  }
  if (!s.ok()) return s;
  if (writers_.size() >= kMaxWriters) {
    for (auto victim = writers_.begin(); victim != writers_.end(); ++victim) {
      if (victim->second.use_count() == 1) {  // no batch of it in flight
        writers_.erase(victim);
        break;
      }
    }
  }
  writers_.emplace(key, writer);
  *out = std::move(writer);
  return Status::Ok();
}

ApiReply Ingest::Post(const std::string& project, const std::string& run, const std::string& body) {
  const json batch_json = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!batch_json.is_object()) return Error(400, "ingest batch: expected a JSON object");
  if (batch_json.value("version", 0) != kIngestVersion) {
    return Error(400, "ingest batch: \"version\" " + batch_json.value("version", json()).dump() + ", this server reads " +
                          std::to_string(kIngestVersion));
  }
  std::shared_ptr<Writer> writer;
  Status s = WriterFor(project, run, &writer);
  if (!s.ok()) return Error(s.IsInvalidArgument() ? 400 : 503, s.message());
  std::lock_guard<std::mutex> lock(writer->mu);
  auto* store = static_cast<PostgresRunStore*>(writer->store.get());
  BatchReader reader(batch_json, store);
  const bool has_findings = batch_json.contains("findings");
  s = store->WriteAdvancing(
      [&](const StreamPositions& held, WriteBatch* batch, StreamPositions* after) { return reader.Read(held, batch, after); },
      has_findings);
  // "close" ends the run: its status, reason and times come with the batch's metadata, as
  // the source wrote them.
  StreamPositions positions;
  const Status read = store->ReadPositions(&positions);
  if (reader.gap()) return Reply(409, {{"error", s.message()}, {"positions", PositionsJson(positions)}});
  if (!s.ok()) {
    // A broken connection or a failed transaction: the next batch reopens the run.
    std::lock_guard<std::mutex> writers_lock(mu_);
    writers_.erase(project + "/" + run);
    return Error(s.IsInvalidArgument() ? 400 : 503, s.message());
  }
  if (!read.ok()) return Error(503, read.message());
  return Reply(200, {{"batch", batch_json.value("batch", "")}, {"positions", PositionsJson(positions)}});
}

ApiReply Ingest::Positions(const std::string& project, const std::string& run) {
  std::unique_ptr<RunStore> store;
  Status s = RunStore::OpenReadOnly(database_ + "#" + project + "/" + run, &store);
  if (s.IsNotFound()) return Reply(200, {{"positions", json::object()}});
  if (!s.ok()) return Error(503, s.message());
  PostgresRunStore::StreamPositions positions;
  s = static_cast<PostgresRunStore*>(store.get())->ReadPositions(&positions);
  if (!s.ok()) return Error(503, s.message());
  return Reply(200, {{"positions", PositionsJson(positions)}});
}

}  // namespace trainscope::server
