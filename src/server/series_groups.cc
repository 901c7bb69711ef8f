#include "server/series_groups.h"

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainscope::server {

extern const char kSeriesGroupsJson[];  // data/series_groups.json, embedded by cmake/embed_text.cmake

namespace {

// An entry ending in '/' is a prefix, any other a whole tag (the file's "about").
bool Matches(std::string_view tag, const std::string& entry) {
  return entry.back() == '/' ? tag.substr(0, entry.size()) == entry : tag == entry;
}

const std::vector<std::string>& TrainscopeEntries() {
  static const std::vector<std::string> entries = [] {
    const nlohmann::json groups = nlohmann::json::parse(kSeriesGroupsJson);
    std::vector<std::string> all;
    for (const char* group : {"internal", "watch"}) {
      for (const auto& entry : groups.at(group)) all.push_back(entry.get<std::string>());
    }
    return all;
  }();
  return entries;
}

}  // namespace

bool IsTrainscopeSeries(std::string_view tag) {
  for (const std::string& entry : TrainscopeEntries()) {
    if (Matches(tag, entry)) return true;
  }
  return false;
}

}  // namespace trainscope::server
