#include "ingest/roles.h"

#include <nlohmann/json.hpp>

namespace trainscope::ingest {

using json = nlohmann::json;

std::string RoleMapToJson(const RoleMap& roles) {
  json j = json::object();
  for (const auto& [role, tag] : roles) j[role] = tag;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Status ParseRoleOverride(const std::string& text, RoleMap* overrides) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return Status::InvalidArgument("--role " + text + ": expected ROLE=TAG (e.g. loss=train/loss)");
  }
  (*overrides)[doctor::CanonicalRoleKey(text.substr(0, eq))] = text.substr(eq + 1);
  return Status::Ok();
}

}  // namespace trainscope::ingest
