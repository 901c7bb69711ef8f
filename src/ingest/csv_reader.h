// CSV metrics files: Lightning's metrics.csv (sparse: each row fills only the columns
// logged at that moment), Keras CSVLogger, Ultralytics YOLO results.csv (headers padded
// with spaces), and any CSV with a step or epoch column.
//
// The step is the first column named step, global_step, iteration, iter, _step or
// trainer/global_step; else epoch; else the row's index (0-based). Every other column is a
// scalar series under its (trimmed) header name; empty cells are absent points, non-numeric
// cells are skipped and counted. The epoch column is kept as a series too when another
// column is the step. Delimiter: comma, else tab or semicolon if the header has those.
//
// Damage: a row with more or fewer cells than the header is skipped and counted, with its
// line number in a warning; reading goes on.
#pragma once

#include <string>
#include <string_view>

#include "core/run_data.h"
#include "core/status.h"
#include "ingest/import_stats.h"
#include "ingest/line_reader.h"

namespace trainscope::ingest {

Status ReadCsv(const std::string& path, SampleSink* sink, ImportStats* stats, const ProgressFn& progress = nullptr);
Status ReadCsvBuffer(std::string_view text, const std::string& name, SampleSink* sink, ImportStats* stats);
Status ReadCsvLines(LineReader& lines, SampleSink* sink, ImportStats* stats);

// Splits one CSV line (double-quoted cells may hold the delimiter and "" for a quote).
void SplitCsvLine(std::string_view line, char delimiter, std::vector<std::string_view>* cells,
                  std::vector<std::string>* unquoted);

}  // namespace trainscope::ingest
