#include "ingest/roles.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_set>

namespace trainscope::ingest {

extern const char kDefaultRolesJson[];

namespace {

using json = nlohmann::json;

const json& Defaults() {
  static const json defaults = json::parse(kDefaultRolesJson);
  return defaults;
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool MatchesFallback(const std::string& tag, const json& rule) {
  const std::string lower = Lower(tag);
  for (const auto& word : rule.value("contains", json::array())) {
    if (lower.find(word.get<std::string>()) == std::string::npos) return false;
  }
  for (const auto& word : rule.value("exclude", json::array())) {
    if (lower.find(word.get<std::string>()) != std::string::npos) return false;
  }
  const json any = rule.value("any_of", json::array());
  if (any.empty()) return true;
  for (const auto& word : any) {
    if (lower.find(word.get<std::string>()) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

RoleMap ResolveRoles(const std::string& format, const std::vector<std::string>& tags, const RoleMap& overrides) {
  const json& d = Defaults();
  std::unordered_set<std::string> present(tags.begin(), tags.end());
  RoleMap roles;
  for (auto role = d["roles"].begin(); role != d["roles"].end(); ++role) {
    std::vector<std::string> candidates;
    for (auto f = d["formats"].begin(); f != d["formats"].end(); ++f) {
      const std::string& key = f.key();
      if (key == format || key.rfind(format + "/", 0) == 0) {
        for (const auto& c : f->value(role.key(), json::array())) candidates.push_back(c.get<std::string>());
      }
    }
    for (const auto& c : *role) candidates.push_back(c.get<std::string>());
    for (const std::string& c : candidates) {
      if (present.count(c)) {
        roles[role.key()] = c;
        break;
      }
    }
    if (!roles.count(role.key()) && d["fallback"].contains(role.key())) {
      for (const std::string& tag : tags) {
        if (MatchesFallback(tag, d["fallback"][role.key()])) {
          roles[role.key()] = tag;
          break;
        }
      }
    }
  }
  // A run whose only loss-like series is a validation loss should not call it "the loss".
  if (roles.count("loss") && roles.count("val_loss") && roles["loss"] == roles["val_loss"]) roles.erase("loss");
  for (const auto& [role, tag] : overrides) roles[role] = tag;
  return roles;
}

std::string RoleMapToJson(const RoleMap& roles) {
  json j = json::object();
  for (const auto& [role, tag] : roles) j[role] = tag;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Status ParseRoleOverride(const std::string& text, RoleMap* overrides) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return Status::Error("--role " + text + ": expected ROLE=TAG (e.g. loss=train/loss)");
  }
  (*overrides)[text.substr(0, eq)] = text.substr(eq + 1);
  return Status::Ok();
}

}  // namespace trainscope::ingest
