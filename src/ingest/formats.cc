#include "ingest/formats.h"

#include <memory>

#include "ingest/csv_reader.h"
#include "ingest/json_readers.h"
#include "ingest/mapped_file.h"
#include "ingest/mlflow_reader.h"
#include "ingest/text_log_reader.h"
#include "ingest/tfevents_reader.h"
#include "ingest/tfrecord.h"
#include "ingest/wandb_reader.h"

namespace trainscope::ingest {

namespace {

constexpr uint64_t kMaxJsonBytes = uint64_t{2} << 30;

Status ReadWholeJson(const std::string& path, Format format, SampleSink* sink, ImportStats* stats) {
  std::unique_ptr<MappedFile> file;
  Status s = MappedFile::Open(path, &file);
  if (!s.ok()) return s;
  if (file->size() > kMaxJsonBytes) {
    return Status::InvalidArgument(path + ": " + std::to_string(file->size()) + " bytes; expected a JSON document under 2 GiB");
  }
  if (format == Format::kHfTrainerState) return ReadTrainerState(file->view(), path, sink, stats);
  return ReadMegatronGolden(file->view(), path, sink, stats);
}

Status ReadTfEvents(const ImportSource& source, SampleSink* sink, ImportStats* stats, const ImportOptions& options) {
  TfEventsOptions tf;
  tf.progress = options.progress;
  std::vector<std::string> files = source.files;
  if (files.empty()) files.push_back(source.path);
  stats->format = "tfevents";
  for (const std::string& f : files) {
    Status s = ReadTfEventsFile(f, 0, sink, stats, tf);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

// A trainscope store: an SQLite file, by its header.
bool LooksLikeSqlite(std::string_view prefix) {
  return prefix.size() >= 16 && prefix.substr(0, 15) == "SQLite format 3";
}

bool LooksLikeWandbDatastore(std::string_view prefix) {
  return prefix.size() >= 7 && prefix.substr(0, 4) == ":W&B" && static_cast<unsigned char>(prefix[4]) == 0xE1 &&
         static_cast<unsigned char>(prefix[5]) == 0xBE;
}

}  // namespace

const std::vector<FormatEntry>& Formats() {
  static const std::vector<FormatEntry> formats = {
      {.format = Format::kTrainscopeStore, .name = "trainscope", .sniff = LooksLikeSqlite},
      {.format = Format::kTfEvents, .name = "tfevents", .sniff = LooksLikeTfRecord, .read = ReadTfEvents},
      {.format = Format::kHfTrainerState,
       .name = "hf_trainer_state",
       .read = [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions&) {
         return ReadWholeJson(src.path, Format::kHfTrainerState, sink, stats);
       }},
      {.format = Format::kMegatronGolden,
       .name = "megatron_golden",
       .read = [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions&) {
         return ReadWholeJson(src.path, Format::kMegatronGolden, sink, stats);
       }},
      {.format = Format::kJsonl,
       .name = "jsonl",
       .read = [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions& o) {
         return ReadJsonl(src.path, sink, stats, o.progress);
       }},
      {.format = Format::kCsv,
       .name = "csv",
       .read = [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions& o) {
         return ReadCsv(src.path, sink, stats, o.progress);
       }},
      {.format = Format::kTextLog,
       .name = "text_log",
       .aliases = {"text", "log"},
       .read = [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions& o) {
         return ReadTextLog(src.path, sink, stats, o.progress);
       }},
      // An MLflow file-store run folder: mlflow_reader.h. Its folder test goes before W&B's.
      {.format = Format::kMlflow,
       .name = "mlflow",
       .aliases = {"mlflow_run"},
       .is_run_folder = IsMlflowRunFolder,
       .read = [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions&) {
         return ReadMlflowRun(src.path, sink, stats);
       }},
      // A W&B run folder, or a lone run-*.wandb datastore: wandb_reader.h.
      {.format = Format::kWandb,
       .name = "wandb",
       .aliases = {"wandb_run", "wandb_datastore"},
       .sniff = LooksLikeWandbDatastore,
       .is_run_folder = IsWandbRunFolder,
       .read = [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions&) {
         return ReadWandbRun(src.path, sink, stats);
       }},
  };
  return formats;
}

const FormatEntry* FindFormat(Format format) {
  for (const FormatEntry& f : Formats()) {
    if (f.format == format) return &f;
  }
  return nullptr;
}

}  // namespace trainscope::ingest
