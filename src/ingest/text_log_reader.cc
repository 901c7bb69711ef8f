#include "ingest/text_log_reader.h"

#include <algorithm>
#include <cmath>
#include <climits>
#include <ctime>
#include <map>
#include <memory>
#include <unordered_set>
#include <vector>

#include "core/tag.h"
#include "ingest/parse_util.h"

namespace trainscope::ingest {

namespace {

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Reads "YYYY-MM-DD HH:MM:SS[,.fff]" at the start of s; advances s past it.
bool ParseTimestamp(std::string_view* s, double* wall_time) {
  const std::string_view t = *s;
  if (t.size() < 19) return false;
  const int pos[] = {0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18};
  for (int p : pos) {
    if (!IsDigit(t[p])) return false;
  }
  if (t[4] != '-' || t[7] != '-' || (t[10] != ' ' && t[10] != 'T') || t[13] != ':' || t[16] != ':') return false;
  auto num = [&](int a, int n) {
    int v = 0;
    for (int i = 0; i < n; ++i) v = v * 10 + (t[a + i] - '0');
    return v;
  };
  std::tm tm{};
  tm.tm_year = num(0, 4) - 1900;
  tm.tm_mon = num(5, 2) - 1;
  tm.tm_mday = num(8, 2);
  tm.tm_hour = num(11, 2);
  tm.tm_min = num(14, 2);
  tm.tm_sec = num(17, 2);
  double seconds = static_cast<double>(timegm(&tm));
  size_t i = 19;
  if (i < t.size() && (t[i] == ',' || t[i] == '.')) {
    double scale = 0.1, frac = 0;
    size_t j = i + 1;
    while (j < t.size() && IsDigit(t[j]) && j < i + 10) {
      frac += (t[j] - '0') * scale;
      scale /= 10;
      ++j;
    }
    if (j > i + 1) {
      seconds += frac;
      i = j;
    }
  }
  *wall_time = seconds;
  s->remove_prefix(i);
  return true;
}

// Strips a leading timestamp and [bracketed] groups; returns the rest.
std::string_view StripPrefix(std::string_view line, double* wall_time, bool* has_time) {
  std::string_view s = Trim(line);
  for (int round = 0; round < 8; ++round) {
    if (!s.empty() && s.front() == '[') {
      const size_t close = s.find(']');
      if (close == std::string_view::npos || close > 200) break;
      std::string_view inner = s.substr(1, close - 1);
      double t;
      if (ParseTimestamp(&inner, &t)) {
        *wall_time = t;
        *has_time = true;
      }
      // A bracket that is a value list (lr=[...]) never starts a line; a "[deepspeed]"
      // marker is kept as the word before the message by the OVERFLOW check.
      s = Trim(s.substr(close + 1));
      continue;
    }
    double t;
    if (ParseTimestamp(&s, &t)) {
      *wall_time = t;
      *has_time = true;
      s = Trim(s);
      if (StartsWith(s, "- ")) s = Trim(s.substr(2));
      continue;
    }
    break;
  }
  return s;
}

// "12.5ms" -> 12.5, unit "ms". Accepts a trailing "(...)" remark, which is dropped.
bool ParseValueUnit(std::string_view s, double* value, std::string* unit) {
  s = Trim(s);
  unit->clear();
  if (!s.empty() && s.back() == ')') {
    const size_t open = s.rfind('(');
    if (open != std::string_view::npos && open > 0) s = Trim(s.substr(0, open));
  }
  if (s.empty()) return false;
  if (s.front() == '[') {  // a list: its first element
    const size_t end = s.find_first_of(",]");
    if (end == std::string_view::npos) return false;
    return ParseNumber(s.substr(1, end - 1), value);
  }
  const size_t sign = (s.front() == '-' || s.front() == '+') ? 1 : 0;
  if (sign < s.size() && IsAlpha(s[sign])) {  // nan, inf, Infinity, -inf spelled as words
    size_t w = sign;
    while (w < s.size() && IsAlpha(s[w])) ++w;
    if (!ParseNumber(s.substr(0, w), value)) return false;
    return Trim(s.substr(w)).empty();
  }
  size_t n = 0;
  while (n < s.size() && (IsDigit(s[n]) || s[n] == '.' || s[n] == '-' || s[n] == '+' || s[n] == 'e' || s[n] == 'E')) {
    // 'e' belongs to the number only when followed by a digit or sign.
    if ((s[n] == 'e' || s[n] == 'E') && !(n + 1 < s.size() && (IsDigit(s[n + 1]) || s[n + 1] == '-' || s[n + 1] == '+')))
      break;
    ++n;
  }
  if (n == 0) return false;
  if (!ParseNumber(s.substr(0, n), value)) return false;
  const std::string_view rest = Trim(s.substr(n));
  if (rest.empty()) return true;
  static const char* kUnits[] = {"ms", "s", "%", "GB", "MB", "KB", "GiB", "MiB", "KiB", "B", "us", "TFLOPs", "it/s", "samples/s", "tokens/s"};
  for (const char* u : kUnits) {
    if (rest == u) {
      *unit = rest == "%" ? "pct" : std::string(rest);
      return true;
    }
  }
  return false;
}

// A key as printed, normalised: trimmed, inner whitespace collapsed. Empty if it does not
// look like a metric name (too long, does not start with a letter, odd characters).
std::string NormalizeKey(std::string_view key) {
  key = Trim(key);
  if (key.empty() || key.size() > 64 || !(IsAlpha(key.front()) || key.front() == '_')) return "";
  std::string out;
  bool space = false;
  for (char c : key) {
    if (c == ' ' || c == '\t') {
      space = true;
      continue;
    }
    if (!(IsAlpha(c) || IsDigit(c) || c == '_' || c == '/' || c == '-' || c == '.' || c == '(' || c == ')' ||
          c == '@'))
      return "";
    if (space && !out.empty()) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

// Splits at top-level separators (not inside [] or () or quotes).
std::vector<std::string_view> SplitTop(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  int depth = 0;
  char quote = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') quote = c;
    else if (c == '[' || c == '(' || c == '{') ++depth;
    else if ((c == ']' || c == ')' || c == '}') && depth > 0) --depth;
    else if (c == sep && depth == 0) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(s.substr(start));
  return parts;
}

struct Pair {
  std::string key;
  double value;
};

// "key: value" or "key=value" (or, when allow_space, "key value" with the value last).
bool ParsePair(std::string_view part, bool allow_space, Pair* out) {
  part = Trim(part);
  size_t sep = part.find('=');
  const size_t colon = part.find(':');
  if (colon != std::string_view::npos && (sep == std::string_view::npos || colon < sep)) sep = colon;
  std::string_view key, value;
  if (sep != std::string_view::npos) {
    key = part.substr(0, sep);
    value = part.substr(sep + 1);
  } else if (allow_space) {
    const size_t sp = part.find_last_of(" \t");
    if (sp == std::string_view::npos) return false;
    key = part.substr(0, sp);
    value = part.substr(sp + 1);
  } else {
    return false;
  }
  std::string unit;
  if (!ParseValueUnit(value, &out->value, &unit)) {
    // "key value unit" in tables: "time: 35.58s" handled above; try the last token only.
    return false;
  }
  out->key = NormalizeKey(key);
  if (out->key.empty()) return false;
  if (!unit.empty()) out->key += "_" + unit;
  return true;
}

// Step arithmetic on numbers read from a file: saturate instead of overflowing.
int64_t AddSat(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}
int64_t MulSat(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? ((a < 0) != (b < 0) ? INT64_MIN : INT64_MAX) : r;
}

bool IsStepKey(std::string_view k) {
  return k == "step" || k == "global_step" || k == "iteration" || k == "iter" || k == "global step" ||
         k == "Step" || k == "Iteration" || k == "it";
}

class TextLogParser {
 public:
  TextLogParser(const std::string& name, SampleSink* sink, ImportStats* stats) : name_(name), sink_(sink), stats_(stats) {}

  void Line(std::string_view raw, uint64_t line_number) {
    line_number_ = line_number;
    bool has_time = false;
    double t = wall_time_;
    std::string_view s = StripPrefix(raw, &t, &has_time);
    if (has_time) wall_time_ = t;
    if (s.empty()) return;
    const std::string family = Dispatch(s);
    if (!family.empty()) ++families_[family];
  }

  const std::map<std::string, uint64_t>& families() const { return families_; }
  uint64_t points() const { return points_; }

  // The family one line would be parsed as, without emitting anything.
  static std::string Classify(std::string_view raw) {
    ImportStats stats;
    RunData sink;
    TextLogParser p("", &sink, &stats);
    p.Line(raw, 1);
    return p.families_.empty() ? "" : p.families_.begin()->first;
  }

 private:
  void Emit(const std::string& tag, int64_t step, double value) {
    if (!valid_tags_.count(tag)) {
      if (!ValidateTag(tag).ok()) {
        ++stats_->damaged;
        return;
      }
      valid_tags_.insert(tag);
    }
    sink_->OnScalar(tag, step, wall_time_, value);
    ++stats_->scalars;
    ++points_;
  }

  void SetStep(int64_t step) {
    step_ = step;
    has_step_ = true;
    overflow_since_ = 0;
  }

  std::string Dispatch(std::string_view s) {
    if (s.find("OVERFLOW!") != std::string_view::npos) return Overflow(s) ? "deepspeed" : "";
    if (StartsWith(s, "Namespace(") || StartsWith(s, "cmd =")) {
      if (args_.empty()) {
        args_ = std::string(s.substr(0, 64 << 10));
        if (IsValidUtf8(args_)) sink_->OnMeta("args", args_);
      }
      return "";
    }
    if (StartsWith(s, "iteration") && s.find('|') != std::string_view::npos) return Megatron(s) ? "megatron" : "";
    if (s.front() == '|' && (s.find("epoch") != std::string_view::npos || s.find("End of training") != std::string_view::npos))
      return PytorchTable(s) ? "pytorch_examples" : "";
    if ((StartsWith(s, "iter ") || StartsWith(s, "step ")) && s.find(':') != std::string_view::npos) {
      if (NanoGpt(s)) return "nanogpt";
    }
    if (s.front() == '{' && s.back() == '}' && s.find('\'') != std::string_view::npos) return HfDict(s) ? "hf_dict" : "";
    if (s.find("step=") != std::string_view::npos || s.find("global_step=") != std::string_view::npos) {
      if (KeyValues(s, /*deepspeed=*/true)) return "deepspeed";
    }
    return KeyValues(s, false) ? "kv" : "";
  }

  bool Overflow(std::string_view s) {
    ++overflow_since_;
    const int64_t step = AddSat(step_, overflow_since_);
    Emit("amp/overflow_skip", step, 1.0);
    double scale;
    std::string unit;
    size_t at = s.find("reducing to ");
    if (at != std::string_view::npos) {
      std::string_view v = s.substr(at + 12);
      v = v.substr(0, v.find_first_of(" ,."));
      if (ParseNumber(v, &scale)) Emit("amp/loss_scale", step, scale);
    } else if ((at = s.find("loss scale: ")) != std::string_view::npos) {
      std::string_view v = s.substr(at + 12);
      v = v.substr(0, v.find_first_of(" ,"));
      if (ParseNumber(v, &scale)) Emit("amp/loss_scale", step, scale);
    }
    return true;
  }

  bool Megatron(std::string_view s) {
    const std::vector<std::string_view> parts = SplitTop(s, '|');
    std::string_view first = Trim(parts[0]).substr(9);  // after "iteration"
    first = first.substr(0, first.find('/'));
    int64_t step;
    if (!ParseStep(first, &step)) return false;
    SetStep(step);
    for (size_t i = 1; i < parts.size(); ++i) {
      Pair p;
      if (ParsePair(parts[i], false, &p)) Emit(p.key, step, p.value);
    }
    return true;
  }

  bool PytorchTable(std::string_view s) {
    const std::vector<std::string_view> parts = SplitTop(s, '|');
    std::vector<Pair> pairs;
    int kind = 0;  // 1 batch row, 2 end of epoch, 3 end of training
    int64_t batch = -1;
    for (std::string_view part : parts) {
      part = Trim(part);
      if (part.empty()) continue;
      int64_t n;
      if (StartsWith(part, "end of epoch") && ParseStep(part.substr(12), &n)) {
        epoch_ = n;
        kind = 2;
      } else if (StartsWith(part, "End of training")) {
        kind = 3;
      } else if (StartsWith(part, "epoch") && ParseStep(part.substr(5), &n)) {
        epoch_ = n;
        kind = 1;
      } else if (part.find("batches") != std::string_view::npos && part.find('/') != std::string_view::npos) {
        const size_t slash = part.find('/');
        int64_t total;
        std::string_view tot = Trim(part.substr(slash + 1));
        tot = tot.substr(0, tot.find(' '));
        if (ParseStep(part.substr(0, slash), &batch) && ParseStep(tot, &total)) batches_per_epoch_ = total;
      } else {
        Pair p;
        if (ParsePair(part, true, &p)) pairs.push_back(std::move(p));
      }
    }
    if (kind == 0) return false;
    int64_t step = step_;
    if (kind == 1 && batch >= 0) step = AddSat(MulSat(AddSat(epoch_, -1), batches_per_epoch_), batch);
    if (kind == 2) step = batches_per_epoch_ > 0 ? MulSat(epoch_, batches_per_epoch_) : epoch_;
    if (kind != 3) SetStep(step);
    for (const Pair& p : pairs) Emit(p.key, step, p.value);
    return true;
  }

  bool NanoGpt(std::string_view s) {
    const size_t colon = s.find(':');
    int64_t step;
    if (!ParseStep(s.substr(4, colon - 4), &step)) return false;
    std::vector<Pair> pairs;
    for (std::string_view part : SplitTop(s.substr(colon + 1), ',')) {
      Pair p;
      if (ParsePair(part, true, &p)) pairs.push_back(std::move(p));
    }
    if (pairs.empty()) return false;
    SetStep(step);
    for (const Pair& p : pairs) Emit(p.key, step, p.value);
    return true;
  }

  bool HfDict(std::string_view s) {
    std::vector<Pair> pairs;
    bool has_step = false, is_eval = false;
    int64_t step = 0;
    for (std::string_view part : SplitTop(s.substr(1, s.size() - 2), ',')) {
      part = Trim(part);
      if (part.size() < 3 || part.front() != '\'') continue;
      const size_t close = part.find('\'', 1);
      if (close == std::string_view::npos) continue;
      std::string_view key = part.substr(1, close - 1);
      std::string_view rest = Trim(part.substr(close + 1));
      if (rest.empty() || rest.front() != ':') continue;
      std::string_view value = Trim(rest.substr(1));
      if (StartsWith(value, "tensor(")) value = value.substr(7, value.find_first_of(",)") - 7);
      double v;
      if (!ParseNumber(value, &v)) continue;
      if (key == "step") {
        has_step = ParseStep(value, &step);
        continue;
      }
      if (StartsWith(key, "eval_")) is_eval = true;
      if (ValidateTag(key).ok()) pairs.push_back({std::string(key), v});
    }
    if (pairs.empty()) return false;
    if (!has_step) {
      if (!is_eval) ++dict_index_;
      step = dict_index_;
    }
    SetStep(step);
    for (const Pair& p : pairs) Emit(p.key, step, p.value);
    return true;
  }

  bool KeyValues(std::string_view s, bool deepspeed) {
    char sep = ',';
    if (s.find('|') != std::string_view::npos) sep = '|';
    else if (s.find(',') == std::string_view::npos && s.find(';') != std::string_view::npos) sep = ';';
    std::vector<Pair> pairs;
    bool step_found = false, epoch_found = false;
    int64_t step = 0;
    double epoch = 0;
    std::vector<std::string_view> parts = SplitTop(s, sep);
    if (parts.size() == 1 && std::count(s.begin(), s.end(), '=') > 1 && s.find('/') == std::string_view::npos) {
      parts = SplitTop(s, ' ');  // "loss=1.2 acc=0.5 lr=0.001"
    }
    for (std::string_view part : parts) {
      // "epoch=0/micro_step=10/global_step=10": several pairs joined by '/'.
      std::vector<std::string_view> sub{part};
      if (std::count(part.begin(), part.end(), '=') > 1) sub = SplitTop(part, '/');
      for (std::string_view piece : sub) {
        Pair p;
        if (!ParsePair(piece, false, &p)) continue;
        if (IsStepKey(p.key) && std::isfinite(p.value) && std::fabs(p.value) < 9e18) {
          // global_step outranks a micro step or a plain step on the same line.
          if (!step_found || p.key == "global_step") step = static_cast<int64_t>(p.value);
          step_found = true;
          continue;
        }
        if (p.key == "micro_step") continue;
        if (p.key == "epoch") {
          epoch_found = true;
          epoch = p.value;
        }
        pairs.push_back(std::move(p));
      }
    }
    if (pairs.empty() && !step_found) return false;
    if (!deepspeed && !step_found && pairs.size() == 1 && sep == ',' && s.size() > 200) return false;  // prose
    if (step_found) {
      SetStep(step);
    } else if (!has_step_) {
      // No step anywhere yet: number the records.
      step = ++record_index_;
      (void)epoch_found;
      (void)epoch;
    } else {
      step = step_;
    }
    for (const Pair& p : pairs) Emit(p.key, step, p.value);
    return true;
  }

  const std::string& name_;
  SampleSink* sink_;
  ImportStats* stats_;
  uint64_t line_number_ = 0;
  double wall_time_ = 0;
  int64_t step_ = 0;
  bool has_step_ = false;
  int64_t overflow_since_ = 0;
  int64_t epoch_ = 0;
  int64_t batches_per_epoch_ = 0;
  int64_t dict_index_ = 0;
  int64_t record_index_ = 0;
  uint64_t points_ = 0;
  std::string args_;
  std::map<std::string, uint64_t> families_;
  std::unordered_set<std::string> valid_tags_;
};

}  // namespace

std::string TextLineFamily(std::string_view line) { return TextLogParser::Classify(line); }

Status ReadTextLogLines(LineReader& lines, SampleSink* sink, ImportStats* stats) {
  stats->format = "text_log";
  sink->OnMeta("format", "text_log");
  TextLogParser parser(lines.name(), sink, stats);
  std::string_view line;
  for (;;) {
    const LineReader::Result r = lines.Next(&line);
    if (r == LineReader::kEnd) break;
    if (r == LineReader::kError) {
      stats->bytes += lines.bytes_read();
      return Status::Error(lines.error() + (parser.points() ? "; the " + std::to_string(parser.points()) +
                                                                   " points before it were kept"
                                                             : std::string()));
    }
    if (r == LineReader::kTooLong) {
      ++stats->damaged;
      stats->Warn(lines.error());
      continue;
    }
    ++stats->records;
    parser.Line(line, lines.line_number());
  }
  stats->bytes += lines.bytes_read();
  std::string family;
  uint64_t best = 0;
  for (const auto& [f, n] : parser.families()) {
    if (n > best || (n == best && f != "kv")) {
      best = n;
      family = f;
    }
  }
  if (parser.points() == 0) {
    return Status::Error(lines.name() + ": no training metrics recognised in " + std::to_string(stats->records) +
                         " lines (expected Megatron-LM, nanoGPT, DeepSpeed, PyTorch-examples, Hugging Face or "
                         "key: value / key=value lines)");
  }
  sink->OnMeta("log_family", family);
  return Status::Ok();
}

Status ReadTextLog(const std::string& path, SampleSink* sink, ImportStats* stats, const ProgressFn& progress) {
  std::unique_ptr<LineReader> lines;
  Status s = LineReader::Open(path, &lines);
  if (!s.ok()) return s;
  lines->SetProgress(progress);
  return ReadTextLogLines(*lines, sink, stats);
}

Status ReadTextLogBuffer(std::string_view text, const std::string& name, SampleSink* sink, ImportStats* stats) {
  LineReader lines(text, name);
  return ReadTextLogLines(lines, sink, stats);
}

}  // namespace trainscope::ingest
