// StepFrame: everything recorded at one step, in arrival order. The doctor groups the
// sample stream into frames and hands each detector one frame at a time, in step order,
// so a detector sees the same thing online (samples arriving) and offline (a whole run).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/sample.h"

namespace trainscope::doctor {

struct StepFrame {
  int64_t step = 0;
  double wall_time = 0;  // the latest wall time of a sample in the frame (0 when unknown)
  // In arrival order. For `act/<module>` that is the order the forward hooks fired, i.e.
  // forward order, which NaN forensics relies on when no `module_order` meta is given.
  // Tags are views into names that outlive the frame (the Doctor's interned tags): a run
  // has few tags and many points, and a string per point cost more than judging it.
  std::vector<std::pair<std::string_view, double>> scalars;
  std::vector<std::pair<std::string, TensorStats>> stats;
  std::vector<std::pair<std::string, std::vector<float>>> vectors;
  std::vector<Span> spans;

  // The last value logged under `tag` at this step, or nullptr.
  const double* Scalar(std::string_view tag) const {
    for (auto it = scalars.rbegin(); it != scalars.rend(); ++it) {
      if (it->first == tag) return &it->second;
    }
    return nullptr;
  }
  const TensorStats* Stats(std::string_view tag) const {
    for (auto it = stats.rbegin(); it != stats.rend(); ++it) {
      if (it->first == tag) return &it->second;
    }
    return nullptr;
  }
  bool empty() const { return scalars.empty() && stats.empty() && vectors.empty() && spans.empty(); }
};

// A map from tag to T that is looked up with a string_view, without building a string: for
// what a detector works out once per tag rather than once per point.
struct TagHash {
  using is_transparent = void;
  size_t operator()(std::string_view tag) const { return std::hash<std::string_view>{}(tag); }
};
template <class T>
using TagMap = std::unordered_map<std::string, T, TagHash, std::equal_to<>>;

// map[tag] for a map keyed by std::string that looks up string_views (std::less<> or
// TagHash): the key is built only when the tag is new.
template <class Map>
typename Map::mapped_type& At(Map& map, std::string_view tag) {
  auto it = map.find(tag);
  if (it == map.end()) it = map.emplace(std::string(tag), typename Map::mapped_type{}).first;
  return it->second;
}

// Whether `tag` starts with `prefix`; on success *rest is what follows it.
inline bool HasPrefix(std::string_view tag, std::string_view prefix, std::string_view* rest = nullptr) {
  if (tag.size() < prefix.size() || tag.substr(0, prefix.size()) != prefix) return false;
  if (rest) *rest = tag.substr(prefix.size());
  return true;
}

}  // namespace trainscope::doctor
