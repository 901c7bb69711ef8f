#include "ingest/formats.h"

#include <memory>

#include "ingest/csv_reader.h"
#include "ingest/json_readers.h"
#include "ingest/mapped_file.h"
#include "ingest/mlflow_reader.h"
#include "ingest/text_log_reader.h"
#include "ingest/tfevents_reader.h"
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

}  // namespace

const std::vector<FormatEntry>& Formats() {
  static const std::vector<FormatEntry> formats = {
      {Format::kTrainscopeStore, "trainscope", {}, nullptr},
      {Format::kTfEvents, "tfevents", {}, ReadTfEvents},
      {Format::kHfTrainerState, "hf_trainer_state", {},
       [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions&) {
         return ReadWholeJson(src.path, Format::kHfTrainerState, sink, stats);
       }},
      {Format::kMegatronGolden, "megatron_golden", {},
       [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions&) {
         return ReadWholeJson(src.path, Format::kMegatronGolden, sink, stats);
       }},
      {Format::kJsonl, "jsonl", {},
       [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions& o) {
         return ReadJsonl(src.path, sink, stats, o.progress);
       }},
      {Format::kCsv, "csv", {},
       [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions& o) {
         return ReadCsv(src.path, sink, stats, o.progress);
       }},
      {Format::kTextLog, "text_log", {"text", "log"},
       [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions& o) {
         return ReadTextLog(src.path, sink, stats, o.progress);
       }},
      // A W&B run folder (or a lone run-*.wandb datastore): wandb_reader.h.
      {Format::kWandb, "wandb", {"wandb_run", "wandb_datastore"},
       [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions&) {
         return ReadWandbRun(src.path, sink, stats);
       }},
      // An MLflow file-store run folder: mlflow_reader.h.
      {Format::kMlflow, "mlflow", {"mlflow_run"},
       [](const ImportSource& src, SampleSink* sink, ImportStats* stats, const ImportOptions&) {
         return ReadMlflowRun(src.path, sink, stats);
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
