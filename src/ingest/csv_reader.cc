#include "ingest/csv_reader.h"

#include <memory>
#include <vector>

#include "core/tag.h"
#include "ingest/parse_util.h"

namespace trainscope::ingest {

void SplitCsvLine(std::string_view line, char delimiter, std::vector<std::string_view>* cells,
                  std::vector<std::string>* unquoted) {
  cells->clear();
  unquoted->clear();
  size_t i = 0;
  for (;;) {
    // Skip padding before a quote so `  "a,b"` still reads as one cell.
    size_t j = i;
    while (j < line.size() && line[j] == ' ') ++j;
    if (j < line.size() && line[j] == '"') {
      std::string cell;
      size_t k = j + 1;
      for (; k < line.size(); ++k) {
        if (line[k] == '"') {
          if (k + 1 < line.size() && line[k + 1] == '"') {
            cell.push_back('"');
            ++k;
          } else {
            break;
          }
        } else {
          cell.push_back(line[k]);
        }
      }
      unquoted->push_back(std::move(cell));
      // The view is filled in after the loop (unquoted may reallocate); mark with an empty view.
      cells->push_back(std::string_view());
      const size_t next = line.find(delimiter, k);
      if (next == std::string_view::npos) break;
      i = next + 1;
      continue;
    }
    const size_t next = line.find(delimiter, i);
    if (next == std::string_view::npos) {
      cells->push_back(line.substr(i));
      break;
    }
    cells->push_back(line.substr(i, next - i));
    i = next + 1;
  }
  // Point the quoted cells at their unquoted text.
  size_t q = 0;
  for (size_t c = 0; c < cells->size(); ++c) {
    if ((*cells)[c].data() == nullptr && q < unquoted->size()) (*cells)[c] = (*unquoted)[q++];
  }
}

namespace {

// The column of the step: the first of the usual step names, else an epoch column, else -1
// (the row index is the step).
int StepColumn(const std::vector<std::string>& header) {
  for (const char* key : {"step", "global_step", "iteration", "iter", "_step", "trainer/global_step"}) {
    for (size_t i = 0; i < header.size(); ++i) {
      if (EqualsIgnoreCase(header[i], key)) return static_cast<int>(i);
    }
  }
  int epoch_col = -1;
  for (size_t i = 0; i < header.size(); ++i) {
    if (EqualsIgnoreCase(header[i], "epoch")) epoch_col = static_cast<int>(i);
  }
  return epoch_col;
}

}  // namespace

Status ReadCsvLines(LineReader& lines, SampleSink* sink, ImportStats* stats) {
  stats->format = "csv";
  std::string_view line;
  // Header: the first non-empty line.
  LineReader::Result r;
  do {
    r = lines.Next(&line);
    if (r == LineReader::kError) return lines.ErrorStatus();
    if (r == LineReader::kTooLong) return Status::Corruption(lines.error() + " (expected a CSV header)");
  } while (r == LineReader::kLine && Trim(line).empty());
  if (r == LineReader::kEnd) return Status::Corruption(lines.name() + ": empty file (expected a CSV header line)");
  char delimiter = ',';
  if (line.find(',') == std::string_view::npos) {
    if (line.find('\t') != std::string_view::npos) delimiter = '\t';
    else if (line.find(';') != std::string_view::npos) delimiter = ';';
  }
  std::vector<std::string_view> cells;
  std::vector<std::string> unquoted;
  SplitCsvLine(line, delimiter, &cells, &unquoted);
  std::vector<std::string> header;
  for (std::string_view c : cells) header.emplace_back(Trim(c));
  const size_t width = header.size();
  const int step_col = StepColumn(header);
  std::vector<bool> usable(width, true);
  for (size_t i = 0; i < width; ++i) {
    Status s = ValidateTag(header[i]);
    if (!s.ok()) {
      usable[i] = false;
      stats->Warn(lines.name() + ": line " + std::to_string(lines.line_number()) + ": column " + std::to_string(i + 1) +
                  " skipped: " + s.message());
    }
  }
  if (step_col >= 0) usable[step_col] = false;
  if (width < 2 && step_col < 0 && !usable[0]) {
    return Status::Corruption(lines.name() + ": line 1: expected a CSV header naming the columns");
  }
  sink->OnMeta("format", "csv");
  sink->OnMeta("csv_step_column", step_col >= 0 ? header[step_col] : std::string("(row index)"));
  int64_t row = 0;
  uint64_t wide_rows_reported = 0;
  for (;;) {
    r = lines.Next(&line);
    if (r == LineReader::kEnd) break;
    if (r == LineReader::kError) {
      stats->bytes += lines.bytes_read();
      return lines.ErrorStatus();
    }
    if (r == LineReader::kTooLong) {
      ++stats->damaged;
      stats->Warn(lines.error());
      continue;
    }
    if (Trim(line).empty()) continue;
    ++stats->records;
    SplitCsvLine(line, delimiter, &cells, &unquoted);
    if (cells.size() != width) {
      ++stats->damaged;
      if (wide_rows_reported++ < 5) {
        stats->Warn(lines.name() + ": line " + std::to_string(lines.line_number()) + ": expected " +
                    std::to_string(width) + " cells as in the header, found " + std::to_string(cells.size()) +
                    "; row skipped");
      }
      continue;
    }
    int64_t step = row;
    if (step_col >= 0) {
      if (!ParseStep(cells[step_col], &step)) {
        ++stats->damaged;
        stats->Warn(lines.name() + ": line " + std::to_string(lines.line_number()) + ": expected an integer in column \"" +
                    header[step_col] + "\", found \"" + std::string(Trim(cells[step_col]).substr(0, 40)) +
                    "\"; row skipped");
        continue;
      }
    }
    ++row;
    for (size_t i = 0; i < width; ++i) {
      if (!usable[i]) continue;
      const std::string_view cell = Trim(cells[i]);
      if (cell.empty()) continue;  // sparse column: no point here
      double v;
      if (!ParseNumber(cell, &v)) {
        ++stats->skipped_values;
        continue;
      }
      sink->OnScalar(header[i], step, 0.0, v);
      ++stats->scalars;
    }
  }
  stats->bytes += lines.bytes_read();
  return Status::Ok();
}

Status ReadCsv(const std::string& path, SampleSink* sink, ImportStats* stats, const ProgressFn& progress) {
  std::unique_ptr<LineReader> lines;
  Status s = LineReader::Open(path, &lines);
  if (!s.ok()) return s;
  lines->SetProgress(progress);
  return ReadCsvLines(*lines, sink, stats);
}

Status ReadCsvBuffer(std::string_view text, const std::string& name, SampleSink* sink, ImportStats* stats) {
  LineReader lines(text, name);
  return ReadCsvLines(lines, sink, stats);
}

}  // namespace trainscope::ingest
