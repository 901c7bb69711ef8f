#include "server/api_request.h"

#include <charconv>
#include <cstring>
#include <string_view>

namespace trainscope::server::api_request {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ApiReply Error(int status, const std::string& message) { return {status, Dump({{"error", message}})}; }

namespace {

int HttpCode(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return 200;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kCorruption:
    case StatusCode::kIOError:
    case StatusCode::kInternal: return 500;
  }
  return 500;
}

}  // namespace

ApiReply Error(const Status& s) { return Error(HttpCode(s), s.message()); }

std::string RedactPaths(std::string text, const std::string& root) {
  if (!root.empty()) {
    const std::string prefix = root.back() == '/' ? root : root + "/";
    for (size_t at; (at = text.find(prefix)) != std::string::npos;) text.erase(at, prefix.size());
  }
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const bool starts = text[i] == '/' && (i == 0 || std::strchr(" \t(\"'=", text[i - 1]) != nullptr);
    if (!starts) {
      out.push_back(text[i++]);
      continue;
    }
    size_t end = i;
    while (end < text.size() && std::strchr(" \t:\"'),;\\", text[end]) == nullptr) ++end;
    const std::string_view path(text.data() + i, end - i);
    const size_t last = path.find_last_of('/');
    out += path.substr(last + 1);
    i = end;
  }
  return out;
}

const std::string* Param(const QueryParams& params, const char* name) {
  auto it = params.find(name);
  return it == params.end() ? nullptr : &it->second;
}

namespace {

bool ParseInt(const std::string& text, int64_t* value) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, *value);
  return ec == std::errc() && ptr == end && !text.empty();
}

}  // namespace

bool IntParam(const QueryParams& params, const char* name, int64_t lo, int64_t hi, int64_t* value,
              std::string* error) {
  const std::string* text = Param(params, name);
  if (!text) return true;
  if (!ParseInt(*text, value) || *value < lo || *value > hi) {
    *error = std::string("parameter '") + name + "' must be an integer in [" + std::to_string(lo) + ", " +
             std::to_string(hi) + "]";
    return false;
  }
  return true;
}

bool RangeParams(const QueryParams& params, Range* range, std::string* error) {
  return IntParam(params, "width", 1, Api::kMaxWidth, &range->width, error) &&
         IntParam(params, "min", kStepLo, kStepHi, &range->min, error) &&
         IntParam(params, "max", kStepLo, kStepHi, &range->max, error);
}

}  // namespace trainscope::server::api_request
