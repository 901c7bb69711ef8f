// What the dashboard's API endpoints share (server/api.cc, server/api_series.cc): query
// parameters read with bounds, errors as JSON with the HTTP code of their kind, paths kept
// out of what a client sees, and the JSON dump every answer goes through.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json_number.h"
#include "core/status.h"
#include "server/api.h"

namespace trainscope::server::api_request {

using json = nlohmann::json;

inline constexpr int64_t kStepLo = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kStepHi = std::numeric_limits<int64_t>::max();

std::string Dump(const json& j);
ApiReply Error(int status, const std::string& message);
// The HTTP code of a failed Status, by its kind: what the client asked for is not there
// (404), was malformed (400), or the server could not read it (500).
ApiReply Error(const Status& s);

// An error may quote a file (a store's message names its path): a client learns the path
// below the logdir, never where the logdir or anything else lies on the server. Paths under
// `root` become relative to it; any other absolute path keeps only its last component.
std::string RedactPaths(std::string text, const std::string& root);

// Series arrays carry null for NaN/Inf (core/json_number.h; their nonfinite counts tell why).
inline json Num(double v) { return JsonSeriesNumber(v); }

const std::string* Param(const QueryParams& params, const char* name);
// Reads an optional integer parameter into *value, bounded to [lo, hi].
bool IntParam(const QueryParams& params, const char* name, int64_t lo, int64_t hi, int64_t* value, std::string* error);

struct Range {
  int64_t width = 1000;
  int64_t min = kStepLo;
  int64_t max = kStepHi;
};
bool RangeParams(const QueryParams& params, Range* range, std::string* error);

}  // namespace trainscope::server::api_request
