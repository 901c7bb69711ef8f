// The one owner of "a number in JSON" (docs/architecture.md, "One owner per rule"). JSON
// has no NaN or Inf, and every writer of JSON in trainscope goes through this header.
//
// The convention, which the public contracts (DESIGN.md, the tests) already promise:
// - A value field (findings' evidence, tensor stats, `import --json --points`, the runs
//   list's final values) writes a non-finite value as the string "nan", "inf" or "-inf":
//   the evidence survives (a null would hide that the value was non-finite), and Python's
//   float() reads all three back.
// - The dashboard's columnar series arrays (/api/scalars, tensor_stats, vectors, a series'
//   last_value) write null there: uPlot draws a gap, and the row's nonfinite/nan/inf
//   counts say why. That form is JsonSeriesNumber / AppendJsonSeriesNumber.
//
// Header-only; it includes nlohmann/json, so only targets that write JSON include it
// (trainscope_core itself stays standard-library only).
#pragma once

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace trainscope {

// "nan", "inf" or "-inf" for a non-finite value; nullptr for a finite one.
inline const char* NonFiniteName(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return nullptr;
}

// A value field: the number, or its non-finite name as a string.
inline nlohmann::json JsonNumber(double v) {
  if (const char* name = NonFiniteName(v)) return name;
  return v;
}

// An element of a dashboard series array: the number, or null.
inline nlohmann::json JsonSeriesNumber(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

// The same as JsonSeriesNumber, appended to JSON built by hand (the hot /api/scalars):
// the shortest text that reads back as the same double, or null.
inline void AppendJsonSeriesNumber(std::string* out, double v) {
  if (!std::isfinite(v)) {
    *out += "null";
    return;
  }
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  out->append(buffer, end);
}

}  // namespace trainscope
