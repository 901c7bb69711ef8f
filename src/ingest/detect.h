// Format detection by content: the first bytes of a file decide which reader gets it, so
// `trainscope diagnose anything` works whatever the file is called.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace trainscope::ingest {

enum class Format {
  kUnknown,
  kTrainscopeStore,  // SQLite file
  kTfEvents,         // TFRecord with a valid first header
  kHfTrainerState,   // JSON object with "log_history"
  kMegatronGolden,   // JSON object of {"values": ...} series
  kJsonl,            // one JSON object a line
  kCsv,              // a header line and rows with as many cells
  kTextLog,          // lines some text-log family recognises
  kWandb,            // a W&B run folder, or its binary run-*.wandb datastore (":W&B" header)
  kMlflow,           // an MLflow file-store run folder (meta.yaml, metrics/, params/, tags/)
};

const char* FormatName(Format format);
// Parses a FormatName() ("tfevents", "csv", ...); false if unknown.
bool ParseFormatName(std::string_view name, Format* format);

// Decides the format of a file from at most its first kDetectBytes bytes. Returns an error
// naming the file and what was found when no reader fits (empty file, a JSON array,
// binary data, text with no metrics in it).
inline constexpr size_t kDetectBytes = 1024 * 1024;
inline constexpr size_t kDetectLines = 4000;  // text: lines looked at for a metrics line
// A directory is a run folder (W&B: wandb-summary.json, config.yaml, output.log,
// wandb-history.jsonl or run-*.wandb, directly or under files/; MLflow: meta.yaml beside
// metrics/ or params/), or kUnknown without an error.
Status DetectFormat(const std::string& path, Format* format);
Status DetectFormatFromPrefix(std::string_view prefix, const std::string& name, bool whole_file, Format* format);

}  // namespace trainscope::ingest
