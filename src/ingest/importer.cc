#include "ingest/importer.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/tag.h"
#include "ingest/fast_sink.h"
#include "ingest/formats.h"
#include "ingest/tfevents_reader.h"

namespace trainscope::ingest {

namespace fs = std::filesystem;

namespace {

// Forwards every sample and remembers the series' tags in first-seen order (for roles).
class TagCollector : public SampleSink {
 public:
  explicit TagCollector(SampleSink* next) : next_(next) {}
  void OnScalar(std::string_view tag, int64_t step, double wall_time, double value) override {
    Note(tag);
    next_->OnScalar(tag, step, wall_time, value);
  }
  void OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) override {
    Note(tag);
    next_->OnTensorStats(tag, step, wall_time, stats);
  }
  void OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) override {
    next_->OnVector(tag, step, wall_time, values);
  }
  void OnSpan(const Span& span) override { next_->OnSpan(span); }
  void OnFinding(const Finding& finding) override { next_->OnFinding(finding); }
  void OnMeta(std::string_view key, std::string_view value) override {
    if (key == "format") return;  // the importer sets it once, with the sub-format
    next_->OnMeta(key, value);
  }
  std::vector<std::string> tags() const {
    std::vector<std::string> out;
    for (size_t i = 0; i < tags_.size(); ++i) out.push_back(tags_.Name(static_cast<uint32_t>(i)));
    return out;
  }

 private:
  void Note(std::string_view tag) { tags_.Intern(tag); }
  SampleSink* next_;
  TagInterner tags_;
};

// A finer name for the role map and the user: which writer made a CSV or event file.
std::string SubFormat(Format format, const std::vector<std::string>& tags, const std::string& reader_format) {
  // A reader that knows the writer says so ("text_log/llmc", "wandb/datastore").
  if (reader_format.rfind(std::string(FormatName(format)) + "/", 0) == 0) return reader_format;
  auto has = [&](const char* t) { return std::find(tags.begin(), tags.end(), t) != tags.end(); };
  if (format == Format::kCsv || format == Format::kTfEvents) {
    const std::string base = FormatName(format);
    if (has("train/box_loss")) return base + "/yolo";
    if (has("epoch_loss") || has("batch_loss")) return base + "/keras";
    if (format == Format::kCsv && (has("train_loss_step") || has("train_loss_epoch"))) return base + "/lightning";
    return base;
  }
  return FormatName(format);
}

}  // namespace

std::string ImportStatsToJson(const ImportStats& stats) {
  nlohmann::json j = {{"format", stats.format},
                      {"bytes", stats.bytes},
                      {"records", stats.records},
                      {"scalars", stats.scalars},
                      {"tensor_stats", stats.tensor_stats},
                      {"skipped_values", stats.skipped_values},
                      {"unknown_fields", stats.unknown_fields},
                      {"damaged", stats.damaged},
                      {"partial_tail", stats.partial_tail},
                      {"resume_offset", stats.resume_offset},
                      {"warnings", stats.warnings}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status FindImportSources(const std::string& path, std::vector<ImportSource>* sources, size_t* considered) {
  sources->clear();
  *considered = 0;
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::NotFound(path + ": no such file or directory");
  if (!fs::is_directory(path, ec)) {
    ImportSource src;
    src.name = fs::path(path).filename().string();
    src.path = path;
    *considered = 1;
    Status s = DetectFormat(path, &src.format);
    if (!s.ok()) return s;
    if (src.format == Format::kTfEvents) src.files.push_back(path);
    sources->push_back(std::move(src));
    return Status::Ok();
  }
  // A run folder (W&B, MLflow) is one run, whatever files it holds.
  Format folder = Format::kUnknown;
  DetectFormat(path, &folder);
  if (folder != Format::kUnknown) {
    ImportSource src;
    src.name = fs::path(path).filename().string();
    if (src.name.empty()) src.name = fs::path(path).parent_path().filename().string();
    src.path = path;
    src.format = folder;
    *considered = 1;
    sources->push_back(std::move(src));
    return Status::Ok();
  }
  // TensorBoard runs: directories holding event files.
  std::vector<TfEventsRun> runs;
  Status s = FindTfEventsRuns(path, &runs);
  if (!s.ok()) return s;
  std::unordered_set<std::string> taken;
  for (TfEventsRun& run : runs) {
    ImportSource src;
    src.name = run.name;
    src.path = run.dir;
    src.format = Format::kTfEvents;
    src.files = run.files;
    for (const std::string& f : run.files) taken.insert(f);
    *considered += run.files.size();
    sources->push_back(std::move(src));
  }
  // Run folders (W&B, MLflow) and other files a reader recognises, three levels down at
  // most (a run folder's own files belong to it; symlinks such as wandb/latest-run are
  // not followed, so a run is found once).
  fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it.depth() > 3) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_symlink(ec)) continue;
    if (it->is_directory(ec)) {
      Format f = Format::kUnknown;
      DetectFormat(it->path().string(), &f);
      if (f != Format::kUnknown) {
        ImportSource src;
        src.path = it->path().string();
        src.format = f;
        src.name = fs::relative(it->path(), path, ec).string();
        sources->push_back(std::move(src));
        it.disable_recursion_pending();
        ++*considered;
      }
      continue;
    }
    if (!it->is_regular_file(ec) || taken.count(it->path().string())) continue;
    if (it->path().filename() == "trainscope.db" || it->path().filename().string().rfind("trainscope.db", 0) == 0)
      continue;  // stores are found by ListRuns
    if (++*considered > 10000) break;
    ImportSource src;
    src.path = it->path().string();
    Format format;
    if (!DetectFormat(src.path, &format).ok() || format == Format::kTrainscopeStore || format == Format::kTfEvents)
      continue;
    src.format = format;
    src.name = fs::relative(it->path(), path, ec).string();
    sources->push_back(std::move(src));
  }
  std::sort(sources->begin(), sources->end(), [](const ImportSource& a, const ImportSource& b) { return a.name < b.name; });
  return Status::Ok();
}

Status ImportSourceTo(const ImportSource& source, SampleSink* sink, ImportStats* stats, const ImportOptions& options) {
  Format format = options.format != Format::kUnknown ? options.format : source.format;
  // Reading into memory (diagnose): append without RunData's per-point lookup.
  std::unique_ptr<RunDataAppender> appender;
  if (auto* run = dynamic_cast<RunData*>(sink)) {
    appender = std::make_unique<RunDataAppender>(run);
    sink = appender.get();
  }
  TagCollector collector(sink);
  const FormatEntry* entry = FindFormat(format);
  if (entry == nullptr) return Status::Corruption(source.path + ": unrecognised format");
  if (entry->read == nullptr) return Status::InvalidArgument(source.path + ": already a trainscope store (nothing to import)");
  Status s = entry->read(source, &collector, stats, options);
  const std::string sub = SubFormat(format, collector.tags(), stats->format);
  sink->OnMeta("format", sub);
  sink->OnMeta("source", source.path);
  sink->OnMeta("roles", RoleMapToJson(ResolveRoles(sub, collector.tags(), options.roles)));
  sink->OnMeta("import", ImportStatsToJson(*stats));
  return s;
}

Status ImportPath(const std::string& path, SampleSink* sink, ImportStats* stats, const ImportOptions& options) {
  ImportSource source;
  source.path = path;
  source.name = fs::path(path).filename().string();
  std::error_code ec;
  Format folder = Format::kUnknown;
  if (fs::is_directory(path, ec) && options.format == Format::kUnknown) DetectFormat(path, &folder);
  if (folder != Format::kUnknown) {
    source.format = folder;
  } else if (fs::is_directory(path, ec) && options.format != Format::kUnknown && options.format != Format::kTfEvents) {
    source.format = options.format;
  } else if (fs::is_directory(path, ec)) {
    std::vector<TfEventsRun> runs;
    Status s = FindTfEventsRuns(path, &runs);
    if (!s.ok()) return s;
    if (runs.size() != 1) {
      return Status::InvalidArgument(path + ": expected one TensorBoard run (a directory of event files), found " +
                           std::to_string(runs.size()));
    }
    source.format = Format::kTfEvents;
    source.files = runs[0].files;
  } else if (options.format == Format::kUnknown) {
    Status s = DetectFormat(path, &source.format);
    if (!s.ok()) return s;
  }
  return ImportSourceTo(source, sink, stats, options);
}

}  // namespace trainscope::ingest
