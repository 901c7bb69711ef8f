// The text-log tokenizer (text_log_tokens.h): prefixes, pairs, units and compact runs of a
// printed log line.
#include "ingest/text_log_tokens.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <ctime>

#include "ingest/parse_util.h"

namespace trainscope::ingest::text_log {

namespace {

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

}  // namespace

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

// "key: value" or "key=value" (or, when allow_space, "key value" with the value last).
bool ParsePair(std::string_view part, bool allow_space, Pair* out, bool unit_words) {
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

}  // namespace trainscope::ingest::text_log
