#include "ingest/json_readers.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <vector>
#include <limits>
#include <memory>

#include "core/tag.h"
#include "ingest/line_reader.h"
#include "ingest/parse_util.h"

namespace trainscope::ingest {

using json = nlohmann::json;

namespace {

// A number literal too large for a double (1e309) becomes this string, then the literal:
// the JSON parser refuses the whole document for one such number, the readers skip the one
// value with a warning. \u0001 cannot start a real key or value of these formats.
constexpr char kOutOfRange = '\x01';

// The literal of a number too large for a double, or empty for anything else.
std::string OutOfRangeLiteral(const json& v) {
  if (!v.is_string()) return {};
  const std::string& s = v.get_ref<const std::string&>();
  return !s.empty() && s[0] == kOutOfRange ? s.substr(1) : std::string();
}

// Rewrites bare NaN / Infinity / -Infinity tokens (outside strings) as strings, and number
// literals past the range of a double as kOutOfRange strings.
std::string QuoteNonFinite(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\' && i + 1 < text.size()) {
        out.push_back(text[++i]);
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out.push_back(c);
      continue;
    }
    const std::string_view rest = text.substr(i);
    if (rest.substr(0, 3) == "NaN") {
      out += "\"NaN\"";
      i += 2;
    } else if (rest.substr(0, 8) == "Infinity") {
      out += "\"Infinity\"";
      i += 7;
    } else if (rest.substr(0, 9) == "-Infinity") {
      out += "\"-Infinity\"";
      i += 8;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t end = i + 1;
      while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.' ||
                                   text[end] == 'e' || text[end] == 'E' || text[end] == '+' || text[end] == '-')) {
        ++end;
      }
      const std::string_view literal = text.substr(i, end - i);
      // Only an exponent or more than 300 digits can pass the range of a double.
      bool overflows = false;
      if (literal.find_first_of("eE") != std::string_view::npos || literal.size() > 300) {
        errno = 0;
        const double value = std::strtod(std::string(literal).c_str(), nullptr);
        overflows = errno == ERANGE && std::isinf(value);
      }
      if (overflows) {
        out += "\"\\u0001";
        out += literal;
        out += '"';
      } else {
        out += literal;
      }
      i = end - 1;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string LineColumn(std::string_view text, size_t byte) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

const char* TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::string: return "a string";
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    default: return "a number";
  }
}

bool ValidKey(const std::string& key, const std::string& name, ImportStats* stats) {
  Status s = ValidateTag(key);
  if (s.ok()) return true;
  ++stats->damaged;
  stats->Warn(name + ": key skipped: " + s.message());
  return false;
}

void EmitFlattened(const json& obj, const std::string& prefix, int64_t step, double wall_time,
                   const std::string& name, SampleSink* sink, ImportStats* stats, int depth = 0) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "/" + it.key();
    double v;
    if (it->is_object() && depth < 4) {
      EmitFlattened(*it, key, step, wall_time, name, sink, stats, depth + 1);
    } else if (JsonToNumber(*it, &v)) {
      if (!ValidKey(key, name, stats)) continue;
      sink->OnScalar(key, step, wall_time, v);
      ++stats->scalars;
    } else if (const std::string literal = OutOfRangeLiteral(*it); !literal.empty()) {
      ++stats->damaged;
      stats->Warn(name + ": step " + std::to_string(step) + ": \"" + key + "\": " + literal +
                  " is out of the range of a double; value skipped");
    } else {
      ++stats->skipped_values;
    }
  }
}

}  // namespace

Status ParseLenientJson(std::string_view text, const std::string& name, json* out) {
  const std::string quoted = QuoteNonFinite(text);
  try {
    *out = json::parse(quoted);
  } catch (const json::parse_error& e) {
    // Offsets refer to the rewritten text; close enough to point at the place.
    return Status::Corruption(name + ": " + LineColumn(quoted, e.byte ? e.byte - 1 : 0) +
                         ": expected valid JSON: " + e.what());
  } catch (const json::exception& e) {  // e.g. a number too large for any JSON type
    return Status::Corruption(name + ": expected valid JSON: " + e.what());
  }
  return Status::Ok();
}

bool JsonToNumber(const json& v, double* out) {
  if (v.is_number()) {
    *out = v.get<double>();
    return true;
  }
  if (v.is_boolean()) {
    *out = v.get<bool>() ? 1.0 : 0.0;
    return true;
  }
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "NaN" || s == "nan") {
      *out = std::numeric_limits<double>::quiet_NaN();
      return true;
    }
    if (s == "Infinity" || s == "inf") {
      *out = std::numeric_limits<double>::infinity();
      return true;
    }
    if (s == "-Infinity" || s == "-inf") {
      *out = -std::numeric_limits<double>::infinity();
      return true;
    }
  }
  return false;
}

Status ReadTrainerState(std::string_view text, const std::string& name, SampleSink* sink, ImportStats* stats) {
  stats->format = "hf_trainer_state";
  json doc;
  Status s = ParseLenientJson(text, name, &doc);
  if (!s.ok()) return s;
  stats->bytes += text.size();
  if (!doc.is_object()) {
    return Status::Corruption(name + ": expected a JSON object with a \"log_history\" array (trainer_state.json), found " +
                         TypeName(doc));
  }
  auto history = doc.find("log_history");
  if (history == doc.end() || !history->is_array()) {
    return Status::Corruption(name + ": expected a \"log_history\" array (trainer_state.json), found " +
                         (history == doc.end() ? std::string("none") : TypeName(*history)));
  }
  sink->OnMeta("format", "hf_trainer_state");
  json top = json::object();
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() != "log_history") top[it.key()] = *it;
  }
  sink->OnMeta("trainer_state", top.dump());
  size_t index = 0;
  for (const json& entry : *history) {
    ++index;
    ++stats->records;
    if (!entry.is_object()) {
      ++stats->damaged;
      stats->Warn(name + ": log_history[" + std::to_string(index - 1) + "]: expected an object, found " + TypeName(entry));
      continue;
    }
    int64_t step = 0;
    auto st = entry.find("step");
    double d;
    if (st != entry.end() && JsonToNumber(*st, &d) && std::isfinite(d) && std::fabs(d) < 9.0e18) {
      step = static_cast<int64_t>(d);
    } else {
      ++stats->damaged;
      stats->Warn(name + ": log_history[" + std::to_string(index - 1) + "]: expected a numeric \"step\"; entry skipped");
      continue;
    }
    for (auto it = entry.begin(); it != entry.end(); ++it) {
      if (it.key() == "step") continue;
      double v;
      if (!JsonToNumber(*it, &v)) {
        if (const std::string literal = OutOfRangeLiteral(*it); !literal.empty()) {
          ++stats->damaged;
          stats->Warn(name + ": log_history[" + std::to_string(index - 1) + "]: \"" + it.key() + "\": " + literal +
                      " is out of the range of a double; value skipped");
        } else {
          ++stats->skipped_values;  // e.g. "remaining_time": "59h:30m:19s"
        }
        continue;
      }
      if (!ValidKey(it.key(), name, stats)) continue;
      sink->OnScalar(it.key(), step, 0.0, v);
      ++stats->scalars;
    }
  }
  return Status::Ok();
}

Status ReadMegatronGolden(std::string_view text, const std::string& name, SampleSink* sink, ImportStats* stats) {
  stats->format = "megatron_golden";
  json doc;
  Status s = ParseLenientJson(text, name, &doc);
  if (!s.ok()) return s;
  stats->bytes += text.size();
  if (!doc.is_object()) {
    return Status::Corruption(name + ": expected a JSON object of metric series (Megatron golden values), found " +
                         TypeName(doc));
  }
  sink->OnMeta("format", "megatron_golden");
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const json& m = *it;
    if (!m.is_object() || !m.contains("values")) {
      ++stats->skipped_values;
      continue;
    }
    if (!ValidKey(it.key(), name, stats)) continue;
    const json& values = m["values"];
    ++stats->records;
    if (values.is_object()) {
      // The parser orders keys as strings ("1", "10", "5"); put them back in step order.
      std::vector<std::pair<int64_t, double>> points;
      for (auto v = values.begin(); v != values.end(); ++v) {
        int64_t step;
        double x;
        if (!ParseStep(v.key(), &step) || !JsonToNumber(*v, &x)) {
          ++stats->damaged;
          stats->Warn(name + ": \"" + it.key() + "\".values[\"" + v.key() + "\"]: expected step -> number; skipped");
          continue;
        }
        points.emplace_back(step, x);
      }
      std::stable_sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [step, x] : points) {
        sink->OnScalar(it.key(), step, 0.0, x);
        ++stats->scalars;
      }
    } else if (values.is_array()) {
      double start = 1, interval = 1;
      if (m.contains("start_step")) JsonToNumber(m["start_step"], &start);
      if (m.contains("step_interval")) JsonToNumber(m["step_interval"], &interval);
      if (!std::isfinite(start) || !std::isfinite(interval) || std::fabs(start) > 1e15 || std::fabs(interval) > 1e12) {
        return Status::Corruption(name + ": \"" + it.key() + "\": expected finite start_step and step_interval");
      }
      for (size_t i = 0; i < values.size(); ++i) {
        double x;
        const double step = start + interval * static_cast<double>(i);
        if (!JsonToNumber(values[i], &x) || !(std::fabs(step) < 9.0e18)) {
          ++stats->damaged;
          continue;
        }
        sink->OnScalar(it.key(), static_cast<int64_t>(step), 0.0, x);
        ++stats->scalars;
      }
    } else {
      ++stats->damaged;
      stats->Warn(name + ": \"" + it.key() + "\".values: expected an object or an array, found " + TypeName(values));
    }
  }
  return Status::Ok();
}

namespace {

Status ReadJsonlLines(LineReader& lines, SampleSink* sink, ImportStats* stats) {
  stats->format = "jsonl";
  sink->OnMeta("format", "jsonl");
  // current_steps: LLaMA-Factory's trainer_log.jsonl (its "epoch" is fractional, and
  // taking it collapsed 1,358 records onto 8 steps).
  static const char* kStepKeys[] = {"step",  "global_step",         "current_steps", "iteration",
                                    "iter",  "_step", "trainer/global_step", "num_updates", "epoch"};
  std::string_view line;
  int64_t index = 0;
  // mmcv / mmdetection *.log.json: "iter" counts within an epoch for "mode": "train" rows,
  // and a "val" row's "iter" is the size of the evaluation. The step is the train
  // iterations of the epochs before plus iter; a val row sits at the last train step, its
  // metrics under "val/".
  int64_t mm_epoch = INT64_MIN, mm_offset = 0, mm_max_iter = 0, mm_last = 0;
  for (;;) {
    const LineReader::Result r = lines.Next(&line);
    if (r == LineReader::kEnd) break;
    if (r == LineReader::kError) return lines.ErrorStatus();
    if (r == LineReader::kTooLong) {
      ++stats->damaged;
      stats->Warn(lines.error());
      continue;
    }
    ++stats->records;
    if (Trim(line).empty()) continue;
    json obj;
    Status s = ParseLenientJson(line, lines.name() + ": line " + std::to_string(lines.line_number()), &obj);
    if (!s.ok() || !obj.is_object()) {
      ++stats->damaged;
      stats->Warn(s.ok() ? lines.name() + ": line " + std::to_string(lines.line_number()) +
                               ": expected a JSON object, found " + TypeName(obj)
                         : s.message());
      continue;
    }
    int64_t step = index;
    const char* step_key = nullptr;
    auto mode = obj.find("mode");
    auto epoch_it = obj.find("epoch");
    auto iter_it = obj.find("iter");
    double epoch_v = 0, iter_v = 0;
    if (mode != obj.end() && mode->is_string() && epoch_it != obj.end() && iter_it != obj.end() &&
        JsonToNumber(*epoch_it, &epoch_v) && JsonToNumber(*iter_it, &iter_v) && std::isfinite(epoch_v) &&
        std::isfinite(iter_v) && std::fabs(epoch_v) < 1e12 && std::fabs(iter_v) < 1e15) {
      const bool train = mode->get<std::string>() == "train";
      if (train) {
        const int64_t e = static_cast<int64_t>(epoch_v), it = static_cast<int64_t>(iter_v);
        if (e != mm_epoch) {
          if (mm_epoch != INT64_MIN) mm_offset += mm_max_iter;
          mm_epoch = e;
          mm_max_iter = 0;
        }
        mm_max_iter = std::max(mm_max_iter, it);
        mm_last = mm_offset + it;
      }
      obj.erase("iter");
      obj.erase("mode");
      json flat = json::object();
      for (auto it = obj.begin(); it != obj.end(); ++it) {
        flat[train || it.key() == "epoch" || it.key() == "lr" ? it.key() : "val/" + it.key()] = *it;
      }
      double wall_time = 0;
      EmitFlattened(flat, "", mm_last, wall_time, lines.name(), sink, stats);
      ++index;
      continue;
    }
    for (const char* key : kStepKeys) {
      auto it = obj.find(key);
      double d;
      if (it != obj.end() && JsonToNumber(*it, &d) && std::isfinite(d) && std::fabs(d) < 9e18) {
        step = static_cast<int64_t>(d);
        step_key = key;
        break;
      }
    }
    double wall_time = 0;
    for (const char* key : {"_timestamp", "timestamp", "wall_time", "time"}) {
      auto it = obj.find(key);
      if (it != obj.end() && it->is_number()) {
        wall_time = it->get<double>();
        break;
      }
    }
    if (step_key && std::string_view(step_key) != "epoch") obj.erase(step_key);
    EmitFlattened(obj, "", step, wall_time, lines.name(), sink, stats);
    ++index;
  }
  stats->bytes += lines.bytes_read();
  if (stats->scalars == 0) {
    return Status::Corruption(lines.name() + ": no numeric values in " + std::to_string(stats->records) +
                         " lines (expected one JSON object a line with numeric metrics)");
  }
  return Status::Ok();
}

}  // namespace

Status ReadJsonl(const std::string& path, SampleSink* sink, ImportStats* stats, const ProgressFn& progress) {
  std::unique_ptr<LineReader> lines;
  Status s = LineReader::Open(path, &lines);
  if (!s.ok()) return s;
  lines->SetProgress(progress);
  return ReadJsonlLines(*lines, sink, stats);
}

Status ReadJsonlBuffer(std::string_view text, const std::string& name, SampleSink* sink, ImportStats* stats) {
  LineReader lines(text, name);
  return ReadJsonlLines(lines, sink, stats);
}

}  // namespace trainscope::ingest
