// The role map: which series of a run is "the loss", "the val loss", "the lr", "the grad
// norm", ... so the doctor can judge imported logs whatever their writer called things.
//
// Defaults come from data/roles.json (compiled in): per role, candidate tags in order of
// preference, with extra candidates per format tried first, then a name-pattern fallback.
// The resolved map is stored with the run as meta "roles": a JSON object role -> tag,
// holding only roles that found a tag.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace trainscope::ingest {

using RoleMap = std::map<std::string, std::string>;

// Resolves roles for a run of `format` ("tfevents", "csv", ...) whose series are `tags` (in
// the run's order). `overrides` (role -> tag) win over the defaults, even for a tag the run
// does not have (the user knows best; the doctor will find no data and say so).
RoleMap ResolveRoles(const std::string& format, const std::vector<std::string>& tags, const RoleMap& overrides = {});

std::string RoleMapToJson(const RoleMap& roles);
// Parses "role=tag" into overrides; an error names what was wrong.
Status ParseRoleOverride(const std::string& text, RoleMap* overrides);

}  // namespace trainscope::ingest
