#include "core/tag.h"

namespace trainscope {

bool IsValidUtf8(std::string_view bytes) {
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    const unsigned char c = bytes[i];
    if (c < 0x80) { ++i; continue; }
    int extra;
    uint32_t code;
    if ((c & 0xe0) == 0xc0) { extra = 1; code = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { extra = 2; code = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { extra = 3; code = c & 0x07; }
    else return false;
    if (i + extra >= n) return false;
    for (int k = 1; k <= extra; ++k) {
      const unsigned char cc = bytes[i + k];
      if ((cc & 0xc0) != 0x80) return false;
      code = (code << 6) | (cc & 0x3f);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0x80, 0x800, 0x10000};
    if (code < kMinForLength[extra] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

Status ValidateTag(std::string_view tag) {
  if (tag.empty()) return Status::InvalidArgument("invalid tag: empty (a tag names a series, e.g. train/loss)");
  if (tag.size() > kMaxTagBytes) {
    return Status::InvalidArgument("invalid tag '" + std::string(tag.substr(0, 40)) + "...': " +
                         std::to_string(tag.size()) + " bytes, at most " +
                         std::to_string(kMaxTagBytes) + " expected");
  }
  if (!IsValidUtf8(tag)) return Status::InvalidArgument("invalid tag: not valid UTF-8");
  for (size_t i = 0; i < tag.size(); ++i) {
    const unsigned char c = tag[i];
    if (c < 0x20 || c == 0x7f) {
      return Status::InvalidArgument("invalid tag '" + std::string(tag.substr(0, 40)) +
                           "': control character at byte " + std::to_string(i));
    }
  }
  return Status::Ok();
}

}  // namespace trainscope

namespace trainscope::tags {

const TagFamily* FamilyOf(std::string_view tag, std::string_view* rest) {
  for (const TagFamily* family : kFamilies) {
    if (family->Holds(tag, rest)) return family;
  }
  return nullptr;
}

const TagFamily* FamilyNamed(std::string_view name) {
  for (const TagFamily* family : kFamilies) {
    if (family->name == name) return family;
  }
  return nullptr;
}

bool InGroup(std::string_view tag, TagGroup group) {
  for (const KnownTag& known : kKnownTags) {
    if (known.tag == tag && (known.groups & group)) return true;
  }
  const TagFamily* family = FamilyOf(tag);
  return family && (family->groups & group);
}

bool IsTrainscopeSeries(std::string_view tag) { return InGroup(tag, kInternalGroup) || InGroup(tag, kWatchGroup); }

}  // namespace trainscope::tags
