// The format table: one row per format a reader handles (its name, other names it is
// given on the command line, how to tell it and how to read it). FormatName,
// ParseFormatName, DetectFormat and ImportSourceTo read this table.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ingest/importer.h"

namespace trainscope::ingest {

struct FormatEntry {
  Format format;
  const char* name;                        // FormatName(), `import --format NAME`
  std::vector<std::string_view> aliases = {};  // other names ParseFormatName() takes
  // Whether a file's first bytes (at most kDetectBytes) are this format's: a signature
  // that no other format shares, tried in table order before the text cascade of
  // DetectFormatFromPrefix. nullptr: told apart there (JSON objects, JSONL, CSV and text
  // logs, by precedence and shared line tests), or not a file format.
  bool (*sniff)(std::string_view prefix) = nullptr;
  // Whether a directory is a run folder of this format, tried in table order; nullptr: not
  // a folder format.
  bool (*is_run_folder)(const std::string& dir) = nullptr;
  // Reads one source (a file; tfevents: the run's event files) into sink; nullptr: not
  // importable (a trainscope store is opened, not imported).
  Status (*read)(const ImportSource& source, SampleSink* sink, ImportStats* stats,
                 const ImportOptions& options) = nullptr;
};

// Every format, kUnknown excluded, in the order their sniffs and folder tests are tried.
const std::vector<FormatEntry>& Formats();
// The row of `format`, or nullptr (kUnknown).
const FormatEntry* FindFormat(Format format);

}  // namespace trainscope::ingest
