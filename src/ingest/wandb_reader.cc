#include "ingest/wandb_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/tag.h"
#include "ingest/json_readers.h"
#include "ingest/mapped_file.h"
#include "ingest/parse_util.h"
#include "ingest/proto_wire.h"
#include "ingest/text_log_reader.h"
#include "ingest/yaml_loader.h"

namespace trainscope::ingest {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kBlockSize = 32768;
constexpr size_t kChunkHeader = 7;
constexpr size_t kFileHeader = 7;
constexpr uint64_t kMaxRecordBytes = uint64_t{256} << 20;  // one record; W&B's are KBs

enum ChunkType : uint8_t { kFull = 1, kFirst = 2, kMiddle = 3, kLast = 4 };

// Record fields (wandb_internal.proto, message Record).
enum RecordField : uint32_t {
  kHistory = 2, kSummary = 3, kOutput = 4, kConfig = 5, kFiles = 6, kStats = 7, kTelemetry = 11,
  kMetric = 12, kOutputRaw = 13, kRun = 17, kExit = 18, kFinal = 20, kHeader = 21, kFooter = 22,
};

uint32_t ChunkCrc(uint8_t type, std::string_view data) {
  uLong crc = crc32(0L, &type, 1);
  return static_cast<uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
}

uint32_t Le32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return uint32_t{u[0]} | uint32_t{u[1]} << 8 | uint32_t{u[2]} << 16 | uint32_t{u[3]} << 24;
}

// value_json as W&B writes it: a JSON number, NaN, Infinity, -Infinity; anything else
// (objects for media, strings, bools) is not a scalar point.
bool ValueJsonNumber(std::string_view v, double* out) {
  v = Trim(v);
  if (v == "true" || v == "false") return false;
  return ParseNumber(v, out);
}

json ValueJsonToJson(std::string_view v) {
  json j;
  if (ParseLenientJson(v, "", &j).ok()) return j;
  return std::string(v);
}

// A key item (HistoryItem, SummaryItem, ConfigItem): key or nested keys, value_json.
struct Item {
  std::string key;
  std::string_view value_json;
};

bool ReadItem(std::string_view bytes, Item* item) {
  wire::Reader r(bytes);
  item->key.clear();
  item->value_json = {};
  std::string nested;
  while (r.Next()) {
    if (r.type() != wire::kLengthDelimited) continue;
    if (r.field() == 1) item->key = std::string(r.bytes());
    else if (r.field() == 2) nested += (nested.empty() ? "" : "/") + std::string(r.bytes());
    else if (r.field() == 16) item->value_json = r.bytes();
  }
  if (r.error()) return false;
  if (item->key.empty()) item->key = nested;
  return !item->key.empty();
}

class DatastoreParser {
 public:
  DatastoreParser(const std::string& name, SampleSink* sink, ImportStats* stats) : name_(name), sink_(sink), stats_(stats) {}

  void Record(std::string_view bytes) {
    ++stats_->records;
    wire::Reader r(bytes);
    while (r.Next()) {
      if (r.type() != wire::kLengthDelimited) continue;
      switch (r.field()) {
        case kHistory: History(r.bytes()); break;
        case kSummary: Items(r.bytes(), &summary_); break;
        case kConfig: Items(r.bytes(), &config_); break;
        case kRun: Run(r.bytes()); break;
        case kExit: Exit(r.bytes()); break;
        case kOutputRaw: case kOutput: ++console_lines_; break;
        case kStats: ++stats_records_; break;
        case kTelemetry: case kFiles: case kMetric: case kFinal: case kHeader: break;
        case kFooter: footer_ = true; break;
        default: break;
      }
    }
    if (r.error()) {
      ++stats_->damaged;
      stats_->Warn(name_ + ": record " + std::to_string(stats_->records) + ": " + r.error() + "; rest of the record skipped");
    }
  }

  void Finish() {
    if (!config_.empty()) sink_->OnMeta("config", config_.dump(-1, ' ', false, json::error_handler_t::replace));
    if (!summary_.empty()) sink_->OnMeta("wandb_summary", summary_.dump(-1, ' ', false, json::error_handler_t::replace));
    if (has_exit_) sink_->OnMeta("wandb_exit_code", std::to_string(exit_code_));
    json info = {{"history_rows", history_rows_}, {"console_lines", console_lines_}, {"system_stats", stats_records_},
                 {"exit_record", has_exit_}, {"footer", footer_}};
    sink_->OnMeta("wandb_datastore", info.dump());
    stats_->skipped_values += stats_records_;
  }

  bool complete() const { return footer_ || has_exit_; }
  uint64_t history_rows() const { return history_rows_; }

 private:
  void History(std::string_view bytes) {
    ++history_rows_;
    wire::Reader r(bytes);
    std::vector<std::pair<std::string, double>> points;
    bool has_step = false;
    int64_t step = 0;
    double wall_time = 0, step_item = NAN;
    while (r.Next()) {
      if (r.field() == 2 && r.type() == wire::kLengthDelimited) {  // HistoryStep
        wire::Reader s(r.bytes());
        while (s.Next()) {
          if (s.field() == 1 && s.type() == wire::kVarint) {
            step = s.int64();
            has_step = true;
          }
        }
        continue;
      }
      if (r.field() != 1 || r.type() != wire::kLengthDelimited) continue;
      Item item;
      if (!ReadItem(r.bytes(), &item)) {
        ++stats_->damaged;
        continue;
      }
      double v;
      if (!ValueJsonNumber(item.value_json, &v)) {
        ++stats_->skipped_values;  // media, strings, tables
        continue;
      }
      if (item.key == "_step") step_item = v;
      else if (item.key == "_timestamp") wall_time = v;
      else if (item.key == "_runtime") continue;
      else points.emplace_back(std::move(item.key), v);
    }
    if (r.error()) {
      ++stats_->damaged;
      return;
    }
    if (!has_step && std::isfinite(step_item) && std::fabs(step_item) < 9e18) {
      step = static_cast<int64_t>(step_item);
      has_step = true;
    }
    if (!has_step) step = static_cast<int64_t>(history_rows_ - 1);
    for (const auto& [tag, v] : points) {
      if (!ValidateTag(tag).ok()) {
        ++stats_->damaged;
        continue;
      }
      sink_->OnScalar(tag, step, wall_time, v);
      ++stats_->scalars;
    }
  }

  // SummaryRecord / ConfigRecord: update (1) items into *into, remove (2) items out of it.
  void Items(std::string_view bytes, json* into) {
    wire::Reader r(bytes);
    while (r.Next()) {
      if ((r.field() != 1 && r.field() != 2) || r.type() != wire::kLengthDelimited) continue;
      Item item;
      if (!ReadItem(r.bytes(), &item) || !IsValidUtf8(item.key)) continue;
      if (r.field() == 2) {
        into->erase(item.key);
        continue;
      }
      if (item.key == "_wandb") continue;  // W&B's own bookkeeping (versions, host, e-mail)
      (*into)[item.key] = ValueJsonToJson(item.value_json);
    }
  }

  void Run(std::string_view bytes) {
    wire::Reader r(bytes);
    while (r.Next()) {
      if (r.type() != wire::kLengthDelimited) continue;
      const std::string v(r.bytes());
      if (r.field() == 4) Items(r.bytes(), &config_);
      else if (!IsValidUtf8(v)) continue;
      else if (r.field() == 1) sink_->OnMeta("wandb_run_id", v);
      else if (r.field() == 3) sink_->OnMeta("wandb_project", v);
      else if (r.field() == 8) sink_->OnMeta("wandb_display_name", v);
    }
  }

  void Exit(std::string_view bytes) {
    wire::Reader r(bytes);
    has_exit_ = true;
    while (r.Next()) {
      if (r.type() != wire::kVarint) continue;
      if (r.field() == 1) exit_code_ = static_cast<int32_t>(r.varint());
      else if (r.field() == 2) sink_->OnMeta("wandb_runtime_s", std::to_string(static_cast<int32_t>(r.varint())));
    }
  }

  const std::string& name_;
  SampleSink* sink_;
  ImportStats* stats_;
  json summary_ = json::object(), config_ = json::object();
  uint64_t history_rows_ = 0, console_lines_ = 0, stats_records_ = 0;
  bool has_exit_ = false, footer_ = false;
  int32_t exit_code_ = 0;
};

std::string Json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

namespace {

// Whole records from the chunks that carry them: one FULL chunk, or FIRST, MIDDLE..., LAST (the
// LevelDB log layout). A chunk out of that order counts as damaged.
struct RecordAssembler {
  std::string pending;  // a record split over FIRST/MIDDLE chunks
  bool in_record = false;
  void Reset() {
    pending.clear();
    in_record = false;
  }
  // The chunk of `type` at `offset`: a record it completes goes to parser.
  Status Add(uint8_t type, std::string_view data, size_t offset, const std::string& name, DatastoreParser& parser,
             ImportStats* stats) {
    switch (type) {
      case kFull:
        if (in_record) ++stats->damaged;  // a FIRST without its LAST
        in_record = false;
        pending.clear();
        parser.Record(data);
        break;
      case kFirst:
        if (in_record) ++stats->damaged;
        pending.assign(data);
        in_record = true;
        break;
      case kMiddle:
      case kLast:
        if (!in_record) {
          ++stats->damaged;
          stats->Warn(name + ": offset " + std::to_string(offset) +
                      ": a continuation chunk without the start of its record; skipped");
          break;
        }
        if (pending.size() + data.size() > kMaxRecordBytes) {
          return Status::Corruption(name + ": a record over 256 MiB at offset " +
                                    std::to_string(offset + kChunkHeader + data.size()));
        }
        pending.append(data);
        if (type == kLast) {
          parser.Record(pending);
          pending.clear();
          in_record = false;
        }
        break;
    }
    return Status::Ok();
  }
};

}  // namespace

Status ReadWandbDatastore(std::string_view bytes, const std::string& name, SampleSink* sink, ImportStats* stats) {
  if (stats->format.empty()) stats->format = "wandb/datastore";
  if (bytes.size() < kFileHeader || bytes.substr(0, 4) != ":W&B" || static_cast<unsigned char>(bytes[4]) != 0xE1 ||
      static_cast<unsigned char>(bytes[5]) != 0xBE) {
    return Status::Corruption(name + ": offset 0: expected the W&B datastore header (\":W&B\", magic 0xBEE1)");
  }
  if (bytes[6] != 0) {
    return Status::Corruption(name + ": offset 6: datastore version " + std::to_string(static_cast<unsigned char>(bytes[6])) +
                              ", expected 0");
  }
  DatastoreParser parser(name, sink, stats);
  RecordAssembler records;
  size_t pos = kFileHeader;
  std::string cut;  // why the read stopped before the end, if it did
  while (pos < bytes.size()) {
    const size_t left_in_block = kBlockSize - pos % kBlockSize;
    if (left_in_block < kChunkHeader) {  // trailer padding
      pos += left_in_block;
      continue;
    }
    if (bytes.size() - pos < kChunkHeader) {
      cut = "a chunk header cut at offset " + std::to_string(pos);
      break;
    }
    const uint32_t crc = Le32(bytes.data() + pos);
    const size_t length = static_cast<unsigned char>(bytes[pos + 4]) | static_cast<size_t>(static_cast<unsigned char>(bytes[pos + 5])) << 8;
    const uint8_t type = static_cast<uint8_t>(bytes[pos + 6]);
    if (crc == 0 && length == 0 && type == 0) {
      // Zeros where a chunk should be: the rest of a preallocated or unsynced block.
      const size_t next = pos + left_in_block;
      if (bytes.find_first_not_of('\0', pos) >= std::min(next, bytes.size())) {
        if (next >= bytes.size()) break;
        pos = next;
        continue;
      }
    }
    if (kChunkHeader + length > left_in_block) {
      ++stats->damaged;
      stats->Warn(name + ": offset " + std::to_string(pos) + ": a chunk of " + std::to_string(length) +
                  " bytes does not fit in its 32 KiB block; rest of the block skipped");
      records.Reset();
      pos += left_in_block;
      continue;
    }
    if (pos + kChunkHeader + length > bytes.size()) {
      cut = "a chunk cut at offset " + std::to_string(pos) + " (" + std::to_string(length) + " bytes announced, " +
            std::to_string(bytes.size() - pos - kChunkHeader) + " present)";
      break;
    }
    const std::string_view data = bytes.substr(pos + kChunkHeader, length);
    if (ChunkCrc(type, data) != crc || type < kFull || type > kLast) {
      ++stats->damaged;
      stats->Warn(name + ": offset " + std::to_string(pos) + ": chunk " +
                  (type < kFull || type > kLast ? "of unknown type " + std::to_string(type) : std::string("CRC mismatch")) +
                  "; rest of the block skipped");
      records.Reset();
      pos += left_in_block;
      continue;
    }
    pos += kChunkHeader + length;
    Status s = records.Add(type, data, pos - kChunkHeader - length, name, parser, stats);
    if (!s.ok()) return s;
  }
  if (cut.empty() && records.in_record) cut = "a record begun but not finished at the end of the file";
  stats->bytes += std::min(pos, bytes.size());
  stats->resume_offset = pos;
  parser.Finish();
  if (!cut.empty() || !parser.complete()) {
    stats->partial_tail = true;
    stats->Warn(name + ": the datastore ends " + (cut.empty() ? std::string("without exit or footer records") : "with " + cut) +
                " (the run was still writing, or the file was cut); the " + std::to_string(parser.history_rows()) +
                " history rows before it were kept");
    sink->OnMeta("wandb_complete", "false");
  }
  return Status::Ok();
}

Status ReadWandbDatastoreFile(const std::string& path, SampleSink* sink, ImportStats* stats) {
  std::unique_ptr<MappedFile> file;
  Status s = MappedFile::Open(path, &file);
  if (!s.ok()) return s;
  return ReadWandbDatastore(file->view(), path, sink, stats);
}

Status ParseWandbConfig(std::string_view text, const std::string& name, std::string* config_json) {
  json doc;
  Status s = ParseYaml(text, name, &doc);
  if (!s.ok()) return s;
  if (!doc.is_object()) return Status::Corruption(name + ": expected a mapping of settings, found " + std::string(doc.type_name()));
  json config = json::object();
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() == "wandb_version" || it.key() == "_wandb") continue;
    // W&B writes every setting as {desc: ..., value: ...}.
    if (it->is_object() && it->contains("value")) config[it.key()] = (*it)["value"];
    else config[it.key()] = *it;
  }
  *config_json = Json(config);
  return Status::Ok();
}

namespace {

std::string FirstDatastore(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.size() > 6 && n.rfind("run-", 0) == 0 && n.compare(n.size() - 6, 6, ".wandb") == 0 && it->is_regular_file(ec))
      found.push_back(it->path().string());
  }
  std::sort(found.begin(), found.end());
  return found.empty() ? "" : found[0];
}

bool IsFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

bool StartsWithText(const fs::path& p, std::string_view what) {
  std::string prefix;
  return ReadFilePrefix(p.string(), 4096, &prefix).ok() && prefix.find(what) != std::string::npos;
}

fs::path FilesDir(const std::string& dir) {
  std::error_code ec;
  const fs::path files = fs::path(dir) / "files";
  return fs::is_directory(files, ec) ? files : fs::path(dir);
}

}  // namespace

bool IsWandbRunFolder(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  if (!FirstDatastore(dir).empty()) return true;
  for (const fs::path& base : {fs::path(dir), fs::path(dir) / "files"}) {
    if (IsFile(base / "wandb-summary.json") || IsFile(base / "wandb-history.jsonl")) return true;
    if (IsFile(base / "config.yaml") && StartsWithText(base / "config.yaml", "wandb_version")) return true;
  }
  return false;
}

namespace {

// A run folder's summary and config (newer than the datastore's copies, if any) into meta,
// and its system metrics counted (a time, no step: not imported); each file listed in sources.
void ReadSideFiles(const fs::path& base, const std::string& path, SampleSink* sink, ImportStats* stats, json* sources) {
  std::error_code ec;
  std::unique_ptr<MappedFile> file;
  const fs::path summary = base / "wandb-summary.json";
  if (IsFile(summary) && MappedFile::Open(summary.string(), &file).ok()) {
    json j;
    Status s = ParseLenientJson(file->view(), summary.string(), &j);
    if (s.ok() && j.is_object()) sink->OnMeta("wandb_summary", Json(j));
    else stats->Warn(s.ok() ? summary.string() + ": expected a JSON object" : s.message());
    sources->push_back({{"file", fs::relative(summary, path, ec).string()}, {"kind", "summary"}, {"error", s.ok() ? "" : s.message()}});
    ++stats->records;
  }
  const fs::path config = base / "config.yaml";
  if (IsFile(config) && MappedFile::Open(config.string(), &file).ok()) {
    std::string config_json;
    Status s = ParseWandbConfig(file->view(), config.string(), &config_json);
    if (s.ok()) sink->OnMeta("config", config_json);
    else stats->Warn(s.message());
    sources->push_back({{"file", fs::relative(config, path, ec).string()}, {"kind", "config"}, {"error", s.ok() ? "" : s.message()}});
    ++stats->records;
  }
  const fs::path events = base / "wandb-events.jsonl";
  if (IsFile(events)) {
    RunData system;
    ImportStats system_stats;
    Status s = ReadJsonl(events.string(), &system, &system_stats);
    stats->skipped_values += system_stats.scalars;  // system metrics: a time, no step
    stats->records += system_stats.records;
    sources->push_back({{"file", fs::relative(events, path, ec).string()}, {"kind", "system"}, {"points", system_stats.scalars},
                       {"used", false}, {"error", s.ok() ? "" : s.message()}});
  }
}

}  // namespace

Status ReadWandbRun(const std::string& path, SampleSink* sink, ImportStats* stats) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    stats->format = "wandb/datastore";
    return ReadWandbDatastoreFile(path, sink, stats);
  }
  const fs::path base = FilesDir(path);
  struct Candidate {
    std::string file, kind;
    RunData data;
    ImportStats stats;
    Status status;
  };
  std::vector<std::unique_ptr<Candidate>> candidates;
  auto add = [&](const std::string& file, const std::string& kind) {
    if (file.empty() || !IsFile(file)) return;
    auto c = std::make_unique<Candidate>();
    c->file = file;
    c->kind = kind;
    if (kind == "datastore") c->status = ReadWandbDatastoreFile(file, &c->data, &c->stats);
    else if (kind == "history") c->status = ReadJsonl(file, &c->data, &c->stats);
    else c->status = ReadTextLog(file, &c->data, &c->stats);
    candidates.push_back(std::move(c));
  };
  std::string datastore = FirstDatastore(path);
  if (datastore.empty() && base != fs::path(path)) datastore = FirstDatastore(base.string());
  add(datastore, "datastore");
  add((base / "wandb-history.jsonl").string(), "history");
  add((base / "output.log").string(), "console");

  Candidate* chosen = nullptr;
  for (auto& c : candidates) {
    if (c->stats.scalars > 0 && (chosen == nullptr || c->stats.scalars > chosen->stats.scalars)) chosen = c.get();
  }
  json sources = json::array();
  for (auto& c : candidates) {
    stats->records += c->stats.records;
    stats->bytes += c->stats.bytes;
    stats->damaged += c->stats.damaged;
    for (const std::string& w : c->stats.warnings) stats->Warn(w);
    sources.push_back({{"file", fs::relative(c->file, path, ec).string()},
                       {"kind", c->kind},
                       {"points", c->stats.scalars},
                       {"used", c.get() == chosen},
                       {"error", c->status.ok() ? "" : c->status.message()}});
    // A crash's traceback is in the console capture whichever source the points come from.
    auto exception = c->data.meta.find("exception");
    if (c->kind == "console" && c.get() != chosen && exception != c->data.meta.end()) sink->OnMeta("exception", exception->second);
    if (c->kind == "datastore") {
      stats->partial_tail = c->stats.partial_tail;
      // What only the datastore knows (exit code, run id, config, summary) is kept whichever
      // source the points come from.
      for (const auto& [k, v] : c->data.meta) sink->OnMeta(k, v);
    }
  }
  stats->format = chosen ? "wandb/" + chosen->kind : "wandb";
  if (chosen) {
    for (const auto& [k, v] : chosen->data.meta) {
      if (k != "format" && chosen->kind != "datastore") sink->OnMeta(k, v);
    }
    RunData only_points;
    only_points.scalars = std::move(chosen->data.scalars);
    only_points.Replay(sink);
    stats->scalars = chosen->stats.scalars;
    stats->skipped_values += chosen->stats.skipped_values;
  }
  ReadSideFiles(base, path, sink, stats, &sources);
  sink->OnMeta("wandb_sources", Json(sources));
  if (!chosen) {
    std::string why;
    for (auto& c : candidates) why += "; " + c->file + ": " + (c->status.ok() ? "no numeric points" : c->status.message());
    return Status::Corruption(path + ": a W&B run folder with no metrics (looked for run-*.wandb, wandb-history.jsonl, output.log)" + why);
  }
  return Status::Ok();
}

}  // namespace trainscope::ingest
