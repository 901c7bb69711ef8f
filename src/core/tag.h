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

// The tag families of DESIGN.md.
namespace tags {
inline std::string Grad(std::string_view param) { return "grad/" + std::string(param); }
inline std::string Weight(std::string_view param) { return "weight/" + std::string(param); }
inline std::string Update(std::string_view param) { return "update/" + std::string(param); }
inline std::string Activation(std::string_view module) { return "act/" + std::string(module); }
inline std::string Time(std::string_view phase) { return "time/" + std::string(phase); }
inline std::string Memory(std::string_view what) { return "mem/" + std::string(what); }
}  // namespace tags

}  // namespace trainscope
