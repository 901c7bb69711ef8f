#include "ingest/tfevents_reader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/tag.h"
#include "ingest/fast_sink.h"
#include "ingest/mapped_file.h"
#include "ingest/proto_wire.h"
#include "ingest/tfevents_proto.h"
#include "ingest/tfrecord.h"

namespace trainscope::ingest {

namespace fs = std::filesystem;

namespace {

using namespace tfevents;  // the protos an event file holds (tfevents_proto.h)

// Decodes the records of one file, keeping per-tag plugin names across records (TF1
// writers attach metadata to the first value of a tag only).
class EventDecoder {
 public:
  EventDecoder(const std::string& name, SampleSink* sink, ImportStats* stats)
      : name_(name), sink_(sink), stats_(stats) {}

  // Returns false (with *error set) if the record is not a valid Event.
  bool Decode(std::string_view record, uint64_t offset, std::string* error) {
    if (DecodeSimpleScalar(record, offset)) return true;
    Reader r(record);
    double wall_time = 0;
    int64_t step = 0;
    std::string_view summary;
    bool has_summary = false;
    while (r.Next()) {
      switch (r.field()) {
        case event_f::kWallTime:
          if (r.type() != wire::kFixed64) return Bad(offset, "wall_time", error);
          wall_time = r.fixed64_double();
          break;
        case event_f::kStep:
          if (r.type() != wire::kVarint) return Bad(offset, "step", error);
          step = r.int64();
          break;
        case event_f::kSummary:
          if (r.type() != wire::kLengthDelimited) return Bad(offset, "summary", error);
          summary = r.bytes();
          has_summary = true;
          break;
        case event_f::kFileVersion:
          break;
        case event_f::kGraphDef: case event_f::kLogMessage: case event_f::kSessionLog:
        case event_f::kTaggedRunMetadata: case event_f::kMetaGraphDef: case event_f::kSourceMetadata:
          ++stats_->skipped_values;
          break;
        default:
          ++stats_->unknown_fields;
          break;
      }
    }
    if (r.error()) return Bad(offset, r.error(), error);
    if (has_summary) return DecodeSummary(summary, step, wall_time, offset, error);
    return true;
  }

 private:
  // Most records of an event file are one scalar, laid out by every TensorBoard writer as
  // Event{wall_time (1, fixed64), step (2, varint), summary (5) = Summary{value (1) =
  // Value{tag (1), simple_value (2, fixed32)}}}, fields in that order and nothing else.
  // Such a record is decoded here in one straight pass (a third of the reader's time went
  // to walking the three nested messages field by field). Returns false, having delivered
  // nothing, for anything else (a missing step 0, a negative step, another field, another
  // order): the general path below reads those, and would read this layout the same way.
  bool DecodeSimpleScalar(std::string_view record, uint64_t offset) {
    const auto* p = reinterpret_cast<const uint8_t*>(record.data());
    const uint8_t* const end = p + record.size();
    // A varint of at most 9 bytes (so no overflow question); anything longer goes the
    // general way.
    auto varint = [&](uint64_t* out) {
      uint64_t v = 0;
      for (int shift = 0; shift < 63 && p < end; shift += 7) {
        const uint8_t b = *p++;
        v |= static_cast<uint64_t>(b & 0x7f) << shift;
        if (!(b & 0x80)) {
          *out = v;
          return true;
        }
      }
      return false;
    };
    // A length-delimited field that runs exactly to the end of the record.
    auto rest_is = [&](uint8_t key) {
      uint64_t len;
      return p < end && *p++ == key && varint(&len) && len == static_cast<uint64_t>(end - p);
    };
    if (end - p < 9 || *p++ != 0x09) return false;  // wall_time
    uint64_t bits;
    std::memcpy(&bits, p, 8);
    p += 8;
    uint64_t step;
    if (p >= end || *p++ != 0x10 || !varint(&step)) return false;
    if (!rest_is(0x2a) || !rest_is(0x0a)) return false;  // summary, its one value
    uint64_t tag_length;
    if (p >= end || *p++ != 0x0a || !varint(&tag_length) || tag_length > static_cast<uint64_t>(end - p)) return false;
    const std::string_view tag(reinterpret_cast<const char*>(p), static_cast<size_t>(tag_length));
    p += tag_length;
    if (end - p != 5 || *p++ != 0x15) return false;  // simple_value, the last 5 bytes
    uint32_t value_bits;
    std::memcpy(&value_bits, p, 4);
    float value;
    std::memcpy(&value, &value_bits, 4);
    double wall_time;
    std::memcpy(&wall_time, &bits, 8);
    if (!CheckTag(tag, offset)) return true;  // counted and warned, as the general path does
    sink_->OnScalar(tag, static_cast<int64_t>(step), wall_time, value);
    ++stats_->scalars;
    return true;
  }

  bool Bad(uint64_t offset, const char* what, std::string* error) {
    *error = name_ + ": offset " + std::to_string(offset) + ": expected an Event protocol buffer, found a malformed one (" +
             what + ")";
    return false;
  }

  bool DecodeSummary(std::string_view bytes, int64_t step, double wall_time, uint64_t offset, std::string* error) {
    Reader r(bytes);
    while (r.Next()) {
      if (r.field() != 1 || r.type() != wire::kLengthDelimited) {
        ++stats_->unknown_fields;
        continue;
      }
      if (!DecodeValue(r.bytes(), step, wall_time, offset, error)) return false;
    }
    if (r.error()) return Bad(offset, r.error(), error);
    return true;
  }

  bool DecodeValue(std::string_view bytes, int64_t step, double wall_time, uint64_t offset, std::string* error) {
    Reader r(bytes);
    std::string_view tag, tensor, histo, metadata;
    float simple = 0;
    bool has_simple = false, has_tensor = false, has_histo = false, has_metadata = false;
    while (r.Next()) {
      switch (r.field()) {
        case value_f::kTag:
          if (r.type() != wire::kLengthDelimited) return Bad(offset, "tag", error);
          tag = r.bytes();
          break;
        case value_f::kSimpleValue:
          if (r.type() != wire::kFixed32) return Bad(offset, "simple_value", error);
          simple = r.fixed32_float();
          has_simple = true;
          break;
        case value_f::kHisto:
          if (r.type() != wire::kLengthDelimited) return Bad(offset, "histo", error);
          histo = r.bytes();
          has_histo = true;
          break;
        case value_f::kTensor:
          if (r.type() != wire::kLengthDelimited) return Bad(offset, "tensor", error);
          tensor = r.bytes();
          has_tensor = true;
          break;
        case value_f::kMetadata:
          if (r.type() != wire::kLengthDelimited) return Bad(offset, "metadata", error);
          metadata = r.bytes();
          has_metadata = true;
          break;
        case value_f::kNodeName:
          break;
        case value_f::kOldHistogram: case value_f::kImage: case value_f::kAudio:
          break;  // images, audio and old-style histograms: counted below
        default:
          ++stats_->unknown_fields;
          break;
      }
    }
    if (r.error()) return Bad(offset, r.error(), error);
    if (has_simple) {
      if (!CheckTag(tag, offset)) return true;
      sink_->OnScalar(tag, step, wall_time, simple);
      ++stats_->scalars;
      return true;
    }
    if (has_histo) {
      if (!CheckTag(tag, offset)) return true;
      return DecodeHisto(histo, tag, step, wall_time, offset, error);
    }
    return DecodeTensorValue(tag, tensor, has_tensor, metadata, has_metadata, step, wall_time, offset, error);
  }

  bool DecodeTensorValue(std::string_view tag, std::string_view tensor, bool has_tensor, std::string_view metadata,
                         bool has_metadata, int64_t step, double wall_time, uint64_t offset, std::string* error) {
    // A tensor: what it means depends on the plugin, named in this value's metadata or,
    // for TF1 writers, in the first value of the tag.
    std::string plugin;
    std::string_view content;
    if (has_metadata) {
      PluginInfo info;
      if (!DecodeMetadata(metadata, &info)) return Bad(offset, "summary metadata", error);
      plugin = info.name;
      content = info.content;
      if (!plugin.empty()) plugins_[std::string(tag)] = plugin;
    } else {
      auto it = plugins_.find(std::string(tag));
      if (it != plugins_.end()) plugin = it->second;
    }
    if (plugin == "hparams") {
      nlohmann::json hparams = nlohmann::json::object();
      if (!content.empty() && DecodeHparams(content, &hparams) && !hparams.empty()) {
        sink_->OnMeta("hparams", hparams.dump());
      } else {
        ++stats_->skipped_values;
      }
      return true;
    }
    if (!has_tensor) {
      ++stats_->skipped_values;  // images, audio, old-style histograms, or an empty value
      return true;
    }
    if (!plugin.empty() && plugin != "scalars" && plugin != "histograms") {
      ++stats_->skipped_values;  // text, pr_curves, images, audio, custom plugins
      return true;
    }
    Tensor t;
    if (!DecodeTensor(tensor, &t)) return Bad(offset, "tensor", error);
    stats_->unknown_fields += t.unknown_fields;
    if (!t.numeric) {
      ++stats_->skipped_values;
      return true;
    }
    if (!CheckTag(tag, offset)) return true;
    if (t.dims.empty() && !t.unknown_rank && t.values.size() == 1) {
      sink_->OnScalar(tag, step, wall_time, t.values[0]);
      ++stats_->scalars;
      return true;
    }
    if (t.dims.size() == 2 && t.dims[1] == 3 && t.dims[0] >= 0 &&
        static_cast<uint64_t>(t.dims[0]) == t.values.size() / 3 && t.values.size() % 3 == 0) {
      EmitTf2Histogram(t, tag, step, wall_time);
      ++stats_->tensor_stats;
      return true;
    }
    ++stats_->skipped_values;  // a tensor of another shape
    return true;
  }

  // A TF2 histogram tensor: rows of (left edge, right edge, count).
  void EmitTf2Histogram(const Tensor& t, std::string_view tag, int64_t step, double wall_time) {
    const size_t k = static_cast<size_t>(t.dims[0]);
    std::vector<double> lefts(k), rights(k), counts(k);
    double num = 0;
    for (size_t i = 0; i < k; ++i) {
      lefts[i] = t.values[3 * i];
      rights[i] = t.values[3 * i + 1];
      counts[i] = t.values[3 * i + 2];
      num += counts[i];
    }
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0, sum_sq = 0;
    for (size_t i = 0; i < k; ++i) {
      if (counts[i] <= 0) continue;
      lo = std::min(lo, lefts[i]);
      hi = std::max(hi, rights[i]);
      const double mid = 0.5 * (lefts[i] + rights[i]);
      sum += counts[i] * mid;
      sum_sq += counts[i] * mid * mid;
    }
    sink_->OnTensorStats(tag, step, wall_time, HistogramToStats(lo, hi, num, sum, sum_sq, lefts, rights, counts));
  }

  bool DecodeHisto(std::string_view bytes, std::string_view tag, int64_t step, double wall_time, uint64_t offset,
                   std::string* error) {
    Reader r(bytes);
    double min = 0, max = 0, num = 0, sum = 0, sum_sq = 0;
    std::vector<double>& limits = limits_;
    std::vector<double>& counts = counts_;
    limits.clear();
    counts.clear();
    while (r.Next()) {
      switch (r.field()) {
        case histo_f::kMin: min = r.fixed64_double(); break;
        case histo_f::kMax: max = r.fixed64_double(); break;
        case histo_f::kNum: num = r.fixed64_double(); break;
        case histo_f::kSum: sum = r.fixed64_double(); break;
        case histo_f::kSumSquares: sum_sq = r.fixed64_double(); break;
        case histo_f::kBucketLimit:
          if (!AppendRepeated(r, wire::kFixed64, &limits, AsDouble)) return Bad(offset, "bucket_limit", error);
          break;
        case histo_f::kBucket:
          if (!AppendRepeated(r, wire::kFixed64, &counts, AsDouble)) return Bad(offset, "bucket", error);
          break;
        default:
          ++stats_->unknown_fields;
      }
    }
    if (r.error()) return Bad(offset, r.error(), error);
    if (limits.size() != counts.size()) return Bad(offset, "histogram with bucket_limit and bucket of different lengths", error);
    std::vector<double>& lefts = lefts_;
    lefts.resize(limits.size());
    for (size_t i = 0; i < limits.size(); ++i) lefts[i] = i ? limits[i - 1] : -std::numeric_limits<double>::infinity();
    sink_->OnTensorStats(tag, step, wall_time, HistogramToStats(min, max, num, sum, sum_sq, lefts, limits, counts));
    ++stats_->tensor_stats;
    return true;
  }

  bool CheckTag(std::string_view tag, uint64_t offset) {
    // A run has few tags and many points: validate each tag once (and, with the interner's
    // guess of the next tag, usually without hashing it).
    if (valid_tags_.Find(tag) != TagInterner::kNotFound) return true;
    Status s = ValidateTag(tag);
    if (!s.ok()) {
      ++stats_->damaged;
      stats_->Warn(name_ + ": offset " + std::to_string(offset) + ": value skipped: " + s.message());
      return false;
    }
    if (valid_tags_.size() < kMaxCachedTags) valid_tags_.Intern(tag);
    return true;
  }

  const std::string& name_;
  SampleSink* sink_;
  ImportStats* stats_;
  std::unordered_map<std::string, std::string> plugins_;
  static constexpr size_t kMaxCachedTags = 1 << 16;
  TagInterner valid_tags_;
  std::vector<double> limits_, counts_, lefts_;  // reused between histograms
};

}  // namespace

TensorStats HistogramToStats(double min, double max, double num, double sum, double sum_squares,
                             const std::vector<double>& lefts, const std::vector<double>& rights,
                             const std::vector<double>& counts) {
  TensorStats s;
  s.numel = num > 0 && std::isfinite(num) ? static_cast<uint64_t>(std::llround(std::min(num, 1e18))) : 0;
  s.sum = sum;
  s.sum_squares = sum_squares;
  if (s.numel > 0) {
    s.min = min;
    s.max = max;
    s.abs_max = std::max(std::fabs(min), std::fabs(max));
  }
  s.has_histogram = true;
  // Our own export writes |x| on power-of-two buckets (limits 0, 2^e, 2^(e+1), ... with
  // every bucket in between present); such a histogram maps back onto the exponent bins
  // exactly. Anything else is mapped bucket by bucket through a representative value: the
  // middle of the bucket within [min, max].
  bool pow2 = !rights.empty();
  for (size_t i = 0; i < rights.size() && pow2; ++i) {
    int e;
    const double r = rights[i];
    if (i == 0 && r == 0) continue;
    pow2 = r > 0 && std::isfinite(r) && std::frexp(r, &e) == 0.5 && (i < 2 || r == 2 * rights[i - 1]);
  }
  for (size_t i = 0; i < counts.size() && i < rights.size(); ++i) {
    const double c = counts[i];
    if (!(c > 0) || !std::isfinite(c)) continue;
    const auto n = static_cast<uint64_t>(std::llround(std::min(c, 1e18)));
    double rep;
    if (pow2) {
      rep = rights[i] / 2;  // [2^e, 2^(e+1)) is bin e; the 0 bucket holds the zeros
    } else {
      double lo = std::isfinite(lefts[i]) ? lefts[i] : rights[i];
      double hi = std::isfinite(rights[i]) ? rights[i] : lo;
      if (s.numel > 0 && min <= max) {
        lo = std::clamp(lo, min, max);
        hi = std::clamp(hi, min, max);
      }
      rep = 0.5 * (lo + hi);
    }
    if (rep == 0) {
      s.zeros += n;
    } else if (std::isfinite(rep)) {
      s.exponent_counts[TensorStats::ExponentBin(std::fabs(rep))] += n;
    }
  }
  return s;
}

bool IsTfEventsFileName(std::string_view filename) { return filename.find("tfevents") != std::string_view::npos; }

Status ReadTfEventsBuffer(std::string_view data, const std::string& name, uint64_t base_offset, SampleSink* sink,
                          ImportStats* stats, const TfEventsOptions& options) {
  if (stats->format.empty()) stats->format = "tfevents";
  TfRecordScanner scanner(data.data(), data.size(), base_offset, options.verify_crc);
  EventDecoder decoder(name, sink, stats);
  std::string_view record;
  std::string error;
  uint64_t next_progress = base_offset + (64u << 20);
  const uint64_t total = base_offset + data.size();
  stats->resume_offset = base_offset;
  stats->partial_tail = false;
  for (;;) {
    const uint64_t at = scanner.offset();
    const TfRecordScanner::Result result = scanner.Next(&record);
    if (result == TfRecordScanner::kEnd) break;
    if (result == TfRecordScanner::kPartial) {
      stats->partial_tail = true;
      break;
    }
    if (result == TfRecordScanner::kCorrupt) {
      stats->bytes += at - stats->resume_offset;
      return Status::Corruption(name + ": " + scanner.error());
    }
    if (result == TfRecordScanner::kBadRecord) {
      ++stats->damaged;
      stats->Warn(name + ": " + scanner.error());
    } else {
      ++stats->records;
      if (!decoder.Decode(record, at, &error)) {
        ++stats->damaged;
        stats->Warn(error);
      }
    }
    stats->resume_offset = scanner.offset();
    if (scanner.offset() >= next_progress) {
      if (options.progress) options.progress(scanner.offset(), total);
      if (options.consumed) options.consumed(scanner.offset() - base_offset);
      next_progress = scanner.offset() + (64u << 20);
    }
  }
  stats->bytes += stats->resume_offset - base_offset;
  return Status::Ok();
}

Status ReadTfEventsFile(const std::string& path, uint64_t offset, SampleSink* sink, ImportStats* stats,
                        const TfEventsOptions& options) {
  std::unique_ptr<MappedFile> file;
  Status s = MappedFile::Open(path, &file);
  if (!s.ok()) return s;
  if (offset > file->size()) {
    return Status::InvalidArgument(path + ": resume offset " + std::to_string(offset) + " is past the end of the file (" +
                         std::to_string(file->size()) + " bytes)");
  }
  TfEventsOptions opts = options;
  MappedFile* f = file.get();
  opts.consumed = [f, offset](uint64_t done) { f->Release(offset + done); };
  return ReadTfEventsBuffer(file->view().substr(offset), path, offset, sink, stats, opts);
}

Status FindTfEventsRuns(const std::string& path, std::vector<TfEventsRun>* runs) {
  runs->clear();
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    TfEventsRun run;
    run.name = fs::path(path).filename().string();
    run.dir = fs::path(path).parent_path().string();
    run.files.push_back(path);
    runs->push_back(std::move(run));
    return Status::Ok();
  }
  if (!fs::is_directory(path, ec)) return Status::NotFound(path + ": no such file or directory");
  std::map<std::string, TfEventsRun> by_dir;
  auto add = [&](const fs::path& file) {
    const std::string dir = file.parent_path().string();
    TfEventsRun& run = by_dir[dir];
    if (run.dir.empty()) {
      run.dir = dir;
      fs::path rel = fs::relative(file.parent_path(), path, ec);
      run.name = ec || rel.empty() ? "." : rel.string();
    }
    run.files.push_back(file.string());
  };
  fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) return Status::IOError(path + ": cannot list: " + ec.message());
  size_t visited = 0;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    if (++visited > 1000000) break;  // a runaway tree; what was found so far is enough
    if (it->is_regular_file(ec) && IsTfEventsFileName(it->path().filename().string())) add(it->path());
  }
  for (auto& [dir, run] : by_dir) {
    std::sort(run.files.begin(), run.files.end());
    runs->push_back(std::move(run));
  }
  return Status::Ok();
}

Status ReadTfEventsRun(const TfEventsRun& run, SampleSink* sink, ImportStats* stats, const TfEventsOptions& options) {
  sink->OnMeta("format", "tfevents");
  for (const std::string& file : run.files) {
    Status s = ReadTfEventsFile(file, 0, sink, stats, options);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace trainscope::ingest
