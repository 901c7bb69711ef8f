// Small text helpers shared by the text, CSV and JSON readers.
#pragma once

#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>

namespace trainscope::ingest {

inline bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

inline std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// Parses the whole of s (trimmed) as a number. Non-finite spellings are numbers too:
// nan, NaN, inf, -inf, Infinity, -Infinity, +inf (Python, JSON-with-NaN, C printf).
inline bool ParseNumber(std::string_view s, double* out) {
  s = Trim(s);
  if (s.empty()) return false;
  bool negative = false;
  std::string_view body = s;
  if (body.front() == '+' || body.front() == '-') {
    negative = body.front() == '-';
    body.remove_prefix(1);
  }
  if (EqualsIgnoreCase(body, "nan")) {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (EqualsIgnoreCase(body, "inf") || EqualsIgnoreCase(body, "infinity")) {
    *out = negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    return true;
  }
  if (body.empty() || !((body.front() >= '0' && body.front() <= '9') || body.front() == '.')) return false;
  double v = 0;
  const auto [ptr, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
  if (ptr != body.data() + body.size()) return false;
  if (ec == std::errc::result_out_of_range) {
    // Overflow or underflow: from_chars leaves v unset; decide by the exponent's sign.
    const size_t e = body.find_first_of("eE");
    const bool tiny = e != std::string_view::npos && e + 1 < body.size() && body[e + 1] == '-';
    v = tiny ? 0.0 : std::numeric_limits<double>::infinity();
  } else if (ec != std::errc()) {
    return false;
  }
  *out = negative ? -v : v;
  return true;
}

// Parses an integer step ("100", "100.0", " 42 ").
inline bool ParseStep(std::string_view s, int64_t* out) {
  s = Trim(s);
  if (s.empty()) return false;
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc() && ptr == s.data() + s.size()) {
    *out = v;
    return true;
  }
  double d;
  if (ParseNumber(s, &d) && std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) {
    *out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

}  // namespace trainscope::ingest
