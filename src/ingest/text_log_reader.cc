#include "ingest/text_log_reader.h"

#include <algorithm>
#include <cmath>
#include <climits>
#include <ctime>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>
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
      // "[default0]:iteration ..." (torchrun's rank prefix), "[ts][train_inner][INFO] - {...}" (fairseq)
      if (StartsWith(s, ":")) s = Trim(s.substr(1));
      if (StartsWith(s, "- ")) s = Trim(s.substr(2));
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

// "12.5ms" -> 12.5, unit "ms". Accepts a trailing "(...)" remark, which is dropped. With
// unit_words, any short word after the number is accepted and dropped ("loss 2.1 BPC",
// nanoGPT forks print the unit of the loss).
bool ParseValueUnit(std::string_view s, double* value, std::string* unit, bool unit_words = false) {
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
  if (unit_words && rest.size() <= 8 && std::all_of(rest.begin(), rest.end(), [](char c) { return IsAlpha(c); }) &&
      rest != "ms" && rest != "s" && rest != "us") {
    return true;
  }
  static const char* kUnits[] = {"ms", "s", "%", "GB", "MB", "KB", "GiB", "MiB", "KiB", "B", "us", "TFLOPs", "it/s", "samples/s", "tokens/s", "tok/s"};
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
bool ParsePair(std::string_view part, bool allow_space, Pair* out, bool unit_words = false) {
  part = Trim(part);
  size_t sep = part.find('=');
  const size_t colon = part.find(':');
  if (colon != std::string_view::npos && (sep == std::string_view::npos || colon < sep)) sep = colon;
  std::string_view key, value;
  if (sep != std::string_view::npos) {
    key = part.substr(0, sep);
    value = part.substr(sep + 1);
  } else if (allow_space) {
    // "train loss 2.1" or "loss 2.1 BPC": the key is the words before the first number.
    size_t sp = std::string_view::npos;
    for (size_t i = 1; i < part.size(); ++i) {
      if ((part[i - 1] == ' ' || part[i - 1] == '\t') && part[i] != ' ' && part[i] != '\t') {
        const char c = part[i];
        const bool numeric = IsDigit(c) || c == '-' || c == '+' || c == '.' ||
                             EqualsIgnoreCase(part.substr(i, 3), "nan") || EqualsIgnoreCase(part.substr(i, 3), "inf");
        if (numeric) {
          sp = i - 1;
          break;
        }
      }
    }
    if (sp == std::string_view::npos) return false;
    key = part.substr(0, sp);
    value = part.substr(sp + 1);
  } else {
    return false;
  }
  std::string unit;
  if (!ParseValueUnit(value, &out->value, &unit, unit_words)) {
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

// Removes ANSI escape sequences (colour codes of loguru, rich, tqdm): ESC [ ... final byte,
// and ESC followed by one character.
std::string_view StripAnsi(std::string_view line, std::string* buffer) {
  if (line.find('\x1b') == std::string_view::npos) return line;
  buffer->clear();
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '\x1b') {
      buffer->push_back(line[i]);
      continue;
    }
    if (i + 1 < line.size() && line[i + 1] == '[') {
      size_t j = i + 2;
      while (j < line.size() && !(line[j] >= 0x40 && line[j] <= 0x7e)) ++j;
      i = j;
    } else {
      ++i;
    }
  }
  return *buffer;
}

// "1,234" -> "1234" (torchtitan prints thousands separators); anything else unchanged.
std::string_view DropThousands(std::string_view v, std::string* buffer) {
  if (v.find(',') == std::string_view::npos) return v;
  size_t digits_since_comma = 0;
  bool seen_comma = false;
  buffer->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const char c = v[i];
    if (c == ',') {
      if (buffer->empty() || (seen_comma && digits_since_comma != 3) || digits_since_comma > 3) return v;
      seen_comma = true;
      digits_since_comma = 0;
      continue;
    }
    if (!IsDigit(c)) {
      if (seen_comma && digits_since_comma != 3) return v;
      buffer->append(v.substr(i));
      return *buffer;
    }
    ++digits_since_comma;
    buffer->push_back(c);
  }
  if (seen_comma && digits_since_comma != 3) return v;
  return *buffer;
}

// Compact "key:value key:value" or "key: value  key: value" pairs separated by whitespace
// (llm.c "s:0 trl:11.0091 lr:0.000001 norm:15.37", modded-nanoGPT "step:0/4400
// val_loss:10.8258 train_time:0ms", torchtitan "step:  1  loss: 12.25  memory: 34.5GiB").
// Keys are single words here; a step key's value may be "N/M". Returns the pairs found.
std::vector<Pair> ScanWordPairs(std::string_view s, bool* has_step, int64_t* step) {
  std::vector<Pair> pairs;
  std::string buffer;
  size_t i = 0;
  while (i < s.size()) {
    const bool boundary = i == 0 || IsSpace(s[i - 1]) || s[i - 1] == ',' || s[i - 1] == '|' || s[i - 1] == ';';
    if (!boundary || !(IsAlpha(s[i]) || s[i] == '_')) {
      ++i;
      continue;
    }
    size_t k = i;
    while (k < s.size() && (IsAlpha(s[k]) || IsDigit(s[k]) || s[k] == '_' || s[k] == '/' || s[k] == '.' || s[k] == '-')) ++k;
    std::string_view key = s.substr(i, k - i);
    size_t j = k;
    while (j < s.size() && s[j] == ' ') ++j;
    if (j >= s.size() || (s[j] != ':' && s[j] != '=')) {
      i = k;
      continue;
    }
    ++j;
    while (j < s.size() && s[j] == ' ') ++j;
    size_t e = j;
    while (e < s.size() && !IsSpace(s[e])) ++e;
    std::string_view value = s.substr(j, e - j);
    while (!value.empty() && (value.back() == ',' || value.back() == ';' || value.back() == '|')) value.remove_suffix(1);
    i = e;
    const bool step_key = IsStepKey(key) || key == "s";
    if (step_key) {
      std::string_view first = value.substr(0, value.find('/'));
      int64_t n;
      if (ParseStep(first, &n)) {
        *has_step = true;
        *step = n;
      }
      continue;
    }
    Pair p;
    std::string unit;
    if (!ParseValueUnit(DropThousands(value, &buffer), &p.value, &unit)) continue;
    p.key = NormalizeKey(key);
    if (p.key.empty()) continue;
    if (!unit.empty()) p.key += "_" + unit;
    pairs.push_back(std::move(p));
  }
  return pairs;
}

class TextLogParser {
 public:
  TextLogParser(const std::string& name, SampleSink* sink, ImportStats* stats) : name_(name), sink_(sink), stats_(stats) {}

  void Line(std::string_view raw, uint64_t line_number) {
    line_number_ = line_number;
    raw = StripAnsi(raw, &ansi_buffer_);
    // A progress bar redraws itself with '\r'; a metrics line may follow it on the same
    // physical line. Each segment is a line of its own.
    if (raw.find('\r') != std::string_view::npos) {
      const std::string whole(raw);
      size_t start = 0;
      while (start <= whole.size()) {
        size_t end = whole.find('\r', start);
        if (end == std::string::npos) end = whole.size();
        if (end > start) Segment(std::string_view(whole).substr(start, end - start));
        start = end + 1;
      }
      return;
    }
    Segment(raw);
  }

  void Segment(std::string_view raw) {
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
  // event: each line is an occurrence (an overflow skip), never a repeat of another.
  void Emit(const std::string& tag, int64_t step, double value, bool event = false) {
    auto last = last_point_.find(tag);
    if (last == last_point_.end()) {
      if (!ValidateTag(tag).ok()) {
        ++stats_->damaged;
        return;
      }
      last = last_point_.emplace(tag, std::pair<int64_t, double>{step, std::nan("")}).first;
    } else if (!event && last->second.first == step && (last->second.second == value ||
                                              (std::isnan(value) && std::isnan(last->second.second)))) {
      // The same record printed again (each rank of a job prints it): kept once.
      ++repeated_;
      return;
    }
    last->second = {step, value};
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
    if (s.find("gradient overflow detected") != std::string_view::npos) return Overflow(s) ? "fairseq" : "";
    if (s.find("%|") != std::string_view::npos) return "";  // a tqdm progress bar ("Upload: 100%|####| 3/3")
    if (StartsWith(s, "Traceback (most recent call last)")) {
      in_traceback_ = true;
      return "";
    }
    if (in_traceback_ && Exception(s)) return "";
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
    if (s.back() == '}') {
      // A printed dict, alone or after a logger's prefix ("INFO | ... - {'loss': 1.2}").
      const size_t py = s.find("{'");
      const size_t js = s.find("{\"");
      if (py != std::string_view::npos && (js == std::string_view::npos || py < js)) {
        if (HfDict(s.substr(py))) return "hf_dict";
      } else if (js != std::string_view::npos) {
        if (JsonDict(s.substr(js))) return "fairseq";
      }
      if (s.front() == '{') return "";
    }
    if (s.find("step=") != std::string_view::npos || s.find("global_step=") != std::string_view::npos) {
      if (KeyValues(s, /*deepspeed=*/true)) return "deepspeed";
    }
    return KeyValues(s, false) ? "kv" : "";
  }

  // The line that ends a Python traceback: "torch.cuda.OutOfMemoryError: CUDA out of
  // memory. ...", "KeyboardInterrupt". Kept as meta "exception" (the last one), as a
  // recorded run that crashed keeps its exception.
  bool Exception(std::string_view s) {
    size_t n = 0;
    while (n < s.size() && (IsAlpha(s[n]) || IsDigit(s[n]) || s[n] == '_' || s[n] == '.')) ++n;
    const std::string_view type = s.substr(0, n);
    if (n == 0 || !IsAlpha(type.front())) return false;
    const bool named = type.size() >= 5 && (type.find("Error") != std::string_view::npos ||
                                            type.find("Exception") != std::string_view::npos ||
                                            type.find("Interrupt") != std::string_view::npos || type.find("Exit") != std::string_view::npos);
    if (!named || (n < s.size() && s[n] != ':')) return false;
    std::string text(s.substr(0, 500));
    if (IsValidUtf8(text)) sink_->OnMeta("exception", text);
    in_traceback_ = false;
    return true;
  }

  bool Overflow(std::string_view s) {
    ++overflow_since_;
    const int64_t step = AddSat(step_, overflow_since_);
    Emit(tags::kAmpOverflowSkip, step, 1.0, /*event=*/true);
    double scale;
    std::string unit;
    size_t at = s.find("reducing to ");
    const size_t arrow = s.find("->");
    const size_t set_to = s.find("loss scale to:");
    if (set_to != std::string_view::npos) {  // fairseq: "setting loss scale to: 64.0"
      std::string_view v = Trim(s.substr(set_to + 14));
      v = v.substr(0, v.find_first_of(" ,"));
      if (ParseNumber(v, &scale)) Emit(tags::kAmpLossScale, step, scale, /*event=*/true);
    } else if (arrow != std::string_view::npos && at == std::string_view::npos) {  // "Scale value A -> B"
      std::string_view v = Trim(s.substr(arrow + 2));
      v = v.substr(0, v.find_first_of(" ,"));
      if (ParseNumber(v, &scale)) Emit(tags::kAmpLossScale, step, scale, /*event=*/true);
    } else if (at != std::string_view::npos) {
      std::string_view v = s.substr(at + 12);
      v = v.substr(0, v.find_first_of(" ,."));
      if (ParseNumber(v, &scale)) Emit(tags::kAmpLossScale, step, scale, /*event=*/true);
    } else if ((at = s.find("loss scale: ")) != std::string_view::npos) {
      std::string_view v = s.substr(at + 12);
      v = v.substr(0, v.find_first_of(" ,"));
      if (ParseNumber(v, &scale)) Emit(tags::kAmpLossScale, step, scale, /*event=*/true);
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
      if (ParsePair(part, true, &p, /*unit_words=*/true)) pairs.push_back(std::move(p));
    }
    if (pairs.empty()) return false;
    SetStep(step);
    for (const Pair& p : pairs) Emit(p.key, step, p.value);
    return true;
  }

  // A JSON object printed by a logger: fairseq's json log format, where numbers are JSON
  // strings ("loss": "9.276"). The step is num_updates (or valid_/train_num_updates),
  // step, iteration or global_step; else the last step seen.
  bool JsonDict(std::string_view s) {
    nlohmann::json obj = nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
    if (!obj.is_object()) return false;
    std::vector<Pair> pairs;
    bool has_step = false;
    int64_t step = step_;
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      double v;
      if (it->is_number()) {
        v = it->get<double>();
      } else if (it->is_string()) {
        if (!ParseNumber(it->get_ref<const std::string&>(), &v)) continue;
      } else {
        continue;
      }
      const std::string& key = it.key();
      const bool updates = key == "num_updates" || (key.size() > 12 && key.compare(key.size() - 12, 12, "_num_updates") == 0);
      if ((updates || IsStepKey(key)) && std::isfinite(v) && std::fabs(v) < 9e18) {
        if (!has_step || updates) step = static_cast<int64_t>(v);
        has_step = true;
        continue;
      }
      if (ValidateTag(key).ok()) pairs.push_back({key, v});
    }
    if (pairs.empty()) return false;
    if (has_step) SetStep(step);
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
    // Fewer than two pairs by separators: try word pairs over the whole line (a comma
    // inside "tps: 1,234" is no separator).
    if (pairs.size() + (step_found ? 1 : 0) < 2) {
      bool word_step = false;
      int64_t wstep = 0;
      std::vector<Pair> words = ScanWordPairs(s, &word_step, &wstep);
      if (words.size() + (word_step ? 1 : 0) >= 2 && words.size() + (word_step ? 1 : 0) > pairs.size() + (step_found ? 1 : 0)) {
        pairs = std::move(words);
        step_found = word_step;
        step = wstep;
        // llm.c's compact "s:N trl:X" lines: its own family, so the role map can name trl/tel.
        if (StartsWith(s, "s:")) compact_llmc_ = true;
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
    if (compact_llmc_ && StartsWith(s, "s:")) llmc_lines_++;
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
  std::unordered_map<std::string, std::pair<int64_t, double>> last_point_;  // per tag: the last (step, value)
  std::string ansi_buffer_;
  uint64_t repeated_ = 0;
  bool compact_llmc_ = false;
  bool in_traceback_ = false;

 public:
  uint64_t repeated() const { return repeated_; }
  uint64_t llmc_lines() const { return llmc_lines_; }

 private:
  uint64_t llmc_lines_ = 0;
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
      const Status failed = lines.ErrorStatus();
      return failed.WithMessage(failed.message() + (parser.points() ? "; the " + std::to_string(parser.points()) +
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
    return Status::Corruption(lines.name() + ": no training metrics recognised in " + std::to_string(stats->records) +
                         " lines (expected Megatron-LM, nanoGPT, DeepSpeed, PyTorch-examples, Hugging Face or "
                         "key: value / key=value lines)");
  }
  // llm.c prints trl/tel/norm (train loss, val loss, grad norm): a family of its own,
  // and a sub-format ("text_log/llmc") the role map names those series for.
  if (parser.llmc_lines() * 2 > stats->records) {
    family = "llmc";
    stats->format = "text_log/llmc";
  }
  if (parser.repeated() > 0) {
    stats->Warn(lines.name() + ": " + std::to_string(parser.repeated()) +
                " values repeated at the same step with the same value (a record printed twice, e.g. by each rank, or a "
                "field two records share); kept once");
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
