// The role map of an imported run: which series is "the loss", "the val loss", "the lr",
// "the grad norm", ... so the doctor can judge imported logs whatever their writer called
// things. The resolver is the doctor's (doctor/roles.h, data/roles.json): the importers and
// the doctor pick the same tag for a role. The resolved map is stored with the run as meta
// "roles": a JSON object role -> tag, holding only roles that found a tag.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "doctor/roles.h"

namespace trainscope::ingest {

using RoleMap = doctor::RoleMap;

// Resolves roles for a run of `format` ("tfevents", "csv", ...) whose series are `tags` (in
// the run's order): doctor::ResolveRoles. `overrides` (role -> tag) win over the defaults,
// even for a tag the run does not have (the user knows best; the doctor will find no data
// and say so).
inline RoleMap ResolveRoles(const std::string& format, const std::vector<std::string>& tags, const RoleMap& overrides = {}) {
  return doctor::ResolveRoles(format, tags, overrides);
}

std::string RoleMapToJson(const RoleMap& roles);
// Parses "role=tag" into overrides; an error names what was wrong.
Status ParseRoleOverride(const std::string& text, RoleMap* overrides);

}  // namespace trainscope::ingest
