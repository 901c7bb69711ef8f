// One entry point for every format: detect, read, describe.
//
// ImportSource() reads one source into a sink and adds the meta a doctor and a user need:
// "format", "source", "roles" (role map JSON, see roles.h), "import" (the ImportStats as
// JSON: records, points, skipped and damaged counts, warnings). On damage the samples
// before it have been delivered and the error says where; callers keep what came.
#pragma once

#include <string>
#include <vector>

#include "core/run_data.h"
#include "core/status.h"
#include "ingest/detect.h"
#include "ingest/import_stats.h"
#include "ingest/roles.h"

namespace trainscope::ingest {

struct ImportOptions {
  Format format = Format::kUnknown;  // kUnknown: detect by content
  RoleMap roles;                     // overrides of the role map
  ProgressFn progress;               // optional, called from the reading thread
};

// Something importable: a file, or the event files of one TensorBoard run.
struct ImportSource {
  std::string name;   // for a logdir: the path relative to it
  std::string path;   // the file, or the run directory for tfevents
  Format format = Format::kUnknown;
  std::vector<std::string> files;  // tfevents: the event files, in name order
};

// Sources under `path`: the file itself, or for a directory every TensorBoard run (a
// directory holding event files) and every other file whose content a reader recognises
// (depth-limited). *considered counts the files looked at. An empty result is not an
// error here; the caller says what was expected.
Status FindImportSources(const std::string& path, std::vector<ImportSource>* sources, size_t* considered);

// Reads one source into sink.
Status ImportSourceTo(const ImportSource& source, SampleSink* sink, ImportStats* stats,
                      const ImportOptions& options = {});

// Detects and reads one file (or one directory of event files).
Status ImportPath(const std::string& path, SampleSink* sink, ImportStats* stats, const ImportOptions& options = {});

std::string ImportStatsToJson(const ImportStats& stats);

}  // namespace trainscope::ingest
