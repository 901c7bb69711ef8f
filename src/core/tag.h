// Tags name series. They are paths: train/loss, grad/<param>, act/<module>, time/<phase>
// (DESIGN.md). A tag is valid UTF-8, non-empty, at most kMaxTagBytes bytes, with no
// control characters; anything else may appear (spaces do, in logs other tools wrote).
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace trainscope {

inline constexpr size_t kMaxTagBytes = 1024;

Status ValidateTag(std::string_view tag);

// Whether bytes are well-formed UTF-8 (no overlongs, no surrogates).
bool IsValidUtf8(std::string_view bytes);

namespace tags {

// Which groups a family or tag belongs to (data/tag_families.json's "groups").
enum TagGroup : unsigned { kInternalGroup = 1, kWatchGroup = 2, kPerformanceGroup = 4 };

// One family of data/tag_families.json: its tags are `prefix` then what `names` says
// (grad/<parameter>, time/<phase>); scope "model" (under a watched model's namespace) or
// "process" (the run's).
struct TagFamily {
  std::string_view name, prefix, names, kind, scope;
  unsigned groups;

  std::string Of(std::string_view rest) const {
    std::string tag(prefix);
    tag += rest;
    return tag;
  }
  // Whether tag is of this family; *rest (when given) the part after the prefix.
  bool Holds(std::string_view tag, std::string_view* rest = nullptr) const {
    if (tag.size() < prefix.size() || tag.compare(0, prefix.size(), prefix) != 0) return false;
    if (rest) *rest = tag.substr(prefix.size());
    return true;
  }
};

// A tag of data/tag_families.json's "tags": one that code names.
struct KnownTag {
  std::string_view tag, kind;
  unsigned groups;
};

}  // namespace tags
}  // namespace trainscope

#include "core/tag_families.h"  // generated from data/tag_families.json

namespace trainscope::tags {

// The family tag belongs to (nullptr: none of the table's, e.g. a user's train/loss); *rest
// the part after its prefix.
const TagFamily* FamilyOf(std::string_view tag, std::string_view* rest = nullptr);

// The family of that name ("grad"), or nullptr.
const TagFamily* FamilyNamed(std::string_view name);

// Whether trainscope recorded this series itself (its internal and watch groups: census/,
// grad/, update_ratio/, train/grad_zeroed ...) rather than the user.
bool IsTrainscopeSeries(std::string_view tag);

// Whether tag is in a group: a family's or a known tag's.
bool InGroup(std::string_view tag, TagGroup group);

}  // namespace trainscope::tags

namespace trainscope {

}  // namespace trainscope
