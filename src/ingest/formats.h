// The format table: one row per format a reader handles (its name, other names it is
// given on the command line, and how to read it). FormatName, ParseFormatName and
// ImportSourceTo read this table; content detection (detect.cc) decides which row a file
// belongs to.
#pragma once

#include <string_view>
#include <vector>

#include "ingest/importer.h"

namespace trainscope::ingest {

struct FormatEntry {
  Format format;
  const char* name;                        // FormatName(), `import --format NAME`
  std::vector<std::string_view> aliases;   // other names ParseFormatName() takes
  // Reads one source (a file; tfevents: the run's event files) into sink; nullptr: not
  // importable (a trainscope store is opened, not imported).
  Status (*read)(const ImportSource& source, SampleSink* sink, ImportStats* stats, const ImportOptions& options);
};

// Every format, kUnknown excluded.
const std::vector<FormatEntry>& Formats();
// The row of `format`, or nullptr (kUnknown).
const FormatEntry* FindFormat(Format format);

}  // namespace trainscope::ingest
