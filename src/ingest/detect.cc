#include "ingest/detect.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "ingest/csv_reader.h"
#include "ingest/formats.h"
#include "ingest/mapped_file.h"
#include "ingest/parse_util.h"
#include "ingest/text_log_reader.h"

namespace trainscope::ingest {

namespace {

std::vector<std::string_view> FirstLines(std::string_view text, size_t max_lines, bool whole_file) {
  std::vector<std::string_view> lines;
  while (!text.empty() && lines.size() < max_lines) {
    const size_t nl = text.find('\n');
    if (nl == std::string_view::npos) {
      if (whole_file) lines.push_back(text);  // else it may be cut by the prefix
      break;
    }
    std::string_view line = text.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!Trim(line).empty()) lines.push_back(line);
    text.remove_prefix(nl + 1);
  }
  return lines;
}

bool LooksBinary(std::string_view prefix) {
  size_t odd = 0;
  for (unsigned char c : prefix) {
    if (c == 0) return true;
    if (c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f') ++odd;
  }
  return odd * 20 > prefix.size();
}

bool IsJsonObjectLine(std::string_view line) {
  line = Trim(line);
  if (line.size() < 2 || line.front() != '{' || line.back() != '}') return false;
  // Non-finite literals would fail accept(); quoting them is the readers' job, here it is
  // enough to know the line is a complete object.
  std::string copy(line);
  for (const char* lit : {"-Infinity", "Infinity", "NaN"}) {
    for (size_t at = copy.find(lit); at != std::string::npos; at = copy.find(lit, at + 1)) {
      std::string zero(std::strlen(lit), ' ');
      zero[0] = '0';
      copy.replace(at, zero.size(), zero);
    }
  }
  return nlohmann::json::accept(copy);
}

// A CSV header names columns: no escape codes or tabs-as-layout, short cells, not a
// sentence. (A console log's first line often holds a comma.)
bool LooksLikeCsvHeader(std::string_view line) {
  if (line.find('\x1b') != std::string_view::npos) return false;
  size_t cells = 1, cell_len = 0, longest = 0;
  for (char c : line) {
    if (c == ',' || c == '\t' || c == ';') {
      ++cells;
      longest = std::max(longest, cell_len);
      cell_len = 0;
    } else {
      ++cell_len;
    }
  }
  longest = std::max(longest, cell_len);
  return cells >= 2 && longest <= 80;
}

// A Chrome trace written by the PyTorch profiler (Kineto): "traceEvents" and one of Kineto's
// marks. (perf/trace_reader.cc reads such files; ingest does not depend on perf.)
bool LooksLikeProfilerTrace(std::string_view text) {
  if (text.find("\"traceEvents\"") == std::string_view::npos) return false;
  for (std::string_view mark : {"\"deviceProperties\"", "\"schemaVersion\"", "\"distributedInfo\"", "\"cpu_op\"",
                                "\"user_annotation\"", "\"kernel\"", "ProfilerStep#"}) {
    if (text.find(mark) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

const char* FormatName(Format format) {
  const FormatEntry* f = FindFormat(format);
  return f ? f->name : "unknown";
}

bool ParseFormatName(std::string_view name, Format* format) {
  for (const FormatEntry& f : Formats()) {
    bool match = name == f.name;
    for (std::string_view alias : f.aliases) match |= name == alias;
    if (match) {
      *format = f.format;
      return true;
    }
  }
  return false;
}

namespace {

bool AnyTextFamily(const std::vector<std::string_view>& lines) {
  for (std::string_view line : lines) {
    if (!TextLineFamily(line).empty()) return true;
  }
  return false;
}

// Text opening with '[': a log line ("[2023-04-18 01:46:52,554] [INFO] ...") or a JSON array,
// which no reader takes. *format stays unknown for anything else.
Status DetectBracketed(std::string_view trimmed, const std::vector<std::string_view>& lines, const std::string& name,
                       Format* format) {
  // "[2023-04-18 01:46:52,554] [INFO] ..." is a log, "[{...}, ...]" is a JSON array.
  if (AnyTextFamily(lines)) {
    *format = Format::kTextLog;
    return Status::Ok();
  }
  const std::string_view first = Trim(lines.empty() ? trimmed : lines[0]);
  const std::string_view after = Trim(first.substr(1));
  const bool json_array = !after.empty() && (after.front() == '{' || after.front() == '[' || after.front() == '"' ||
                                             after.front() == ']' || nlohmann::json::accept(first));
  if (json_array && trimmed.find("\"ph\"") != std::string_view::npos && trimmed.find("\"ts\"") != std::string_view::npos) {
    return Status::InvalidArgument(name + ": a PyTorch profiler trace (an array of trace events), not a training log; "
                                          "analyse it with `trainscope trace " + name + "`");
  }
  if (json_array) {
    return Status::Corruption(name + ": line 1: expected a JSON object (trainer_state.json, Megatron golden values) or one "
                                "object a line (JSONL), found a JSON array");
  }
  return Status::Ok();
}

// Text opening with '{': JSONL (before a trainer state or golden-values object: a one-line
// JSONL file is one object too), a trainer state, golden values, Hugging Face's printed dicts,
// or a JSON object none of them (refused). prefix_size: the bytes read.
Status DetectBraced(std::string_view trimmed, const std::vector<std::string_view>& lines, const std::string& name,
                    bool whole_file, size_t prefix_size, Format* format) {
  // A profiler trace is timing, not metrics: refused here, with the command that reads it
  // (before JSONL: a one-line trace is a complete object on its first line).
  if (LooksLikeProfilerTrace(trimmed)) {
    return Status::InvalidArgument(name + ": a PyTorch profiler (Kineto) trace, not a training log; analyse it with "
                                          "`trainscope trace " + name + "`");
  }
  if (lines.size() >= 1 && IsJsonObjectLine(lines[0]) && (lines.size() >= 2 || whole_file)) {
    // One complete object on the first line: JSONL, unless it is the whole file and is
    // itself a trainer state or golden-values object.
    if (lines.size() >= 2 && IsJsonObjectLine(lines[1])) {
      *format = Format::kJsonl;
      return Status::Ok();
    }
  }
  if (trimmed.find("\"log_history\"") != std::string_view::npos) {
    *format = Format::kHfTrainerState;
    return Status::Ok();
  }
  if (trimmed.find("\"values\"") != std::string_view::npos &&
      (trimmed.find("\"step_interval\"") != std::string_view::npos || trimmed.find("\"start_step\"") != std::string_view::npos)) {
    *format = Format::kMegatronGolden;
    return Status::Ok();
  }
  if (lines.size() >= 1 && IsJsonObjectLine(lines[0])) {
    *format = Format::kJsonl;
    return Status::Ok();
  }
  if (trimmed.front() == '{' && trimmed.find('\'') != std::string_view::npos) {
    *format = Format::kTextLog;  // Hugging Face printed dicts
    return Status::Ok();
  }
  if (whole_file || prefix_size < kDetectBytes) {
    return Status::Corruption(name + ": a JSON object with neither \"log_history\" (trainer_state.json) nor Megatron-style "
                                "{\"values\": ...} series; expected one of those, or JSONL");
  }
  *format = Format::kHfTrainerState;  // a large object: let the reader say what is missing
  return Status::Ok();
}

// CSV: a header with two or more cells, and the next lines with as many. A console line
// that happens to hold a comma is not a header: the header names columns (no escape
// codes, no long prose cells), and most rows below it have its width and numeric cells.
bool LooksLikeCsvTable(const std::vector<std::string_view>& lines) {
  if (lines.size() < 2 || !LooksLikeCsvHeader(lines[0])) return false;
  const std::string_view header = lines[0];
  char delimiter = ',';
  if (header.find(',') == std::string_view::npos) delimiter = header.find('\t') != std::string_view::npos ? '\t' : ';';
  std::vector<std::string_view> cells;
  std::vector<std::string> unquoted;
  SplitCsvLine(header, delimiter, &cells, &unquoted);
  const size_t width = cells.size();
  bool numeric_header = false;
  for (std::string_view c : cells) {
    double v;
    if (ParseNumber(c, &v)) numeric_header = true;
  }
  // A header names columns; a line that already reads as metrics ("iter 1: loss 2.0, ...") is a log.
  if (width < 2 || numeric_header || header.find('|') != std::string_view::npos || !TextLineFamily(header).empty()) {
    return false;
  }
  size_t same = 0, checked = 0, numeric_rows = 0;
  for (size_t i = 1; i < lines.size() && checked < 10; ++i, ++checked) {
    SplitCsvLine(lines[i], delimiter, &cells, &unquoted);
    if (cells.size() != width) continue;
    ++same;
    size_t numeric = 0;
    for (std::string_view c : cells) {
      double v;
      if (Trim(c).empty() || ParseNumber(c, &v)) ++numeric;
    }
    if (numeric * 2 >= cells.size()) ++numeric_rows;
  }
  return checked > 0 && same > 0 && same * 2 >= checked && numeric_rows * 2 >= same;
}

// A header of names over rows that are mostly ragged is still a CSV: the reader names
// the bad rows.
bool LooksLikeRaggedCsv(const std::vector<std::string_view>& lines) {
  if (lines.size() < 2 || !LooksLikeCsvHeader(lines[0])) return false;
  std::vector<std::string_view> cells;
  std::vector<std::string> unquoted;
  SplitCsvLine(lines[0], ',', &cells, &unquoted);
  bool names = cells.size() >= 2;
  for (std::string_view c : cells) {
    double v;
    if (Trim(c).empty() || ParseNumber(c, &v)) names = false;
  }
  return names;
}

}  // namespace

Status DetectFormatFromPrefix(std::string_view prefix, const std::string& name, bool whole_file, Format* format) {
  *format = Format::kUnknown;
  if (prefix.empty()) return Status::Corruption(name + ": empty file (expected an event file, a JSON, CSV or text log)");
  // A format with a signature of its own (formats.cc: a store, an event file, a W&B
  // datastore) decides at once, in table order.
  for (const FormatEntry& f : Formats()) {
    if (f.sniff != nullptr && f.sniff(prefix)) {
      *format = f.format;
      return Status::Ok();
    }
  }
  // The rest is told apart by precedence, in this order: JSON (JSONL before a trainer state
  // or golden-values object), then CSV, then text logs, whose line tests CSV shares.
  std::string_view text = prefix;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 byte order mark
  const std::string_view trimmed = Trim(text);
  if (trimmed.empty()) return Status::Corruption(name + ": only whitespace (expected an event file, a JSON, CSV or text log)");
  if (prefix.size() >= 2 && static_cast<unsigned char>(prefix[0]) == 0x1f && static_cast<unsigned char>(prefix[1]) == 0x8b) {
    return Status::InvalidArgument(name + ": offset 0: gzip-compressed data; a profiler trace (.json.gz) is read by "
                                          "`trainscope trace " + name + "`, other logs must be decompressed first");
  }
  if (LooksBinary(text)) {
    return Status::Corruption(name + ": offset 0: binary data that is not a TFRecord event file (its first record header's "
                                "checksum does not match) nor a trainscope store");
  }
  // Enough lines to pass any preamble: modded-nanoGPT prints its whole source, nvidia-smi
  // and the model before the first metric (~70 lines), fairseq its config, AutoTrain
  // hundreds of blank progress-bar lines.
  const std::vector<std::string_view> lines = FirstLines(text, kDetectLines, whole_file);
  if (trimmed.front() == '[') {
    Status s = DetectBracketed(trimmed, lines, name, format);
    if (!s.ok() || *format != Format::kUnknown) return s;
  }
  if (trimmed.front() == '{') return DetectBraced(trimmed, lines, name, whole_file, prefix.size(), format);
  if (LooksLikeCsvTable(lines)) {
    *format = Format::kCsv;
    return Status::Ok();
  }
  if (AnyTextFamily(lines)) {
    *format = Format::kTextLog;
    return Status::Ok();
  }
  if (LooksLikeRaggedCsv(lines)) {
    *format = Format::kCsv;
    return Status::Ok();
  }
  return Status::Corruption(name + ": text with no recognisable training metrics in its first " + std::to_string(lines.size()) +
                       " lines (expected TFRecord events, trainer_state.json, JSONL, CSV with a header, or a "
                       "training log with key: value / key=value metrics)");
}

Status DetectFormat(const std::string& path, Format* format) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    *format = Format::kUnknown;
    for (const FormatEntry& f : Formats()) {
      if (f.is_run_folder != nullptr && f.is_run_folder(path)) {
        *format = f.format;
        break;
      }
    }
    return Status::Ok();
  }
  std::string prefix;
  Status s = ReadFilePrefix(path, kDetectBytes, &prefix);
  if (!s.ok()) return s;
  return DetectFormatFromPrefix(prefix, path, prefix.size() < kDetectBytes, format);
}

}  // namespace trainscope::ingest
