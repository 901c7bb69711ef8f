#include "doctor/knowledge.h"

#include "doctor/facts.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

Status StringList(const json& obj, const char* key, const std::string& where, std::vector<std::string>* out) {
  out->clear();
  auto it = obj.find(key);
  if (it == obj.end()) return Status::Ok();
  if (!it->is_array()) return Status::InvalidArgument(where + "." + key + ": expected a list of strings");
  for (const json& v : *it) {
    if (!v.is_string()) return Status::InvalidArgument(where + "." + key + ": expected a list of strings");
    out->push_back(v.get<std::string>());
  }
  return Status::Ok();
}

std::string StringOr(const json& obj, const char* key, const std::string& fallback) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace

Status KnowledgeBase::Parse(std::string_view text, std::string_view origin, KnowledgeBase* kb) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    return Status::InvalidArgument(std::string(origin) + ": not valid JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  }
  if (!root.is_object() || !root.contains("codes") || !root["codes"].is_object() || !root.contains("causes") ||
      !root["causes"].is_object()) {
    return Status::InvalidArgument(std::string(origin) + ": expected an object with \"codes\" and \"causes\" objects");
  }
  KnowledgeBase out;
  for (const auto& [id, c] : root["causes"].items()) {
    const std::string where = std::string(origin) + ": causes." + id;
    if (!c.is_object()) return Status::InvalidArgument(where + ": expected an object");
    CauseInfo info;
    info.id = id;
    info.title = StringOr(c, "title", id);
    Status s = StringList(c, "raised_by", where, &info.raised_by);
    if (s.ok()) s = StringList(c, "lowered_by", where, &info.lowered_by);
    if (s.ok()) s = StringList(c, "actions", where, &info.actions);
    if (s.ok()) s = StringList(c, "excluded_by", where, &info.excluded_by);
    if (s.ok()) s = StringList(c, "requires", where, &info.required);
    if (s.ok()) s = StringList(c, "confirmed_by", where, &info.confirmed_by);
    if (!s.ok()) return s;
    for (const auto* list : {&info.excluded_by, &info.required, &info.confirmed_by}) {
      for (const std::string& fact : *list) {
        if (!FindFact(fact)) {
          return Status::InvalidArgument(where + ": unknown fact id '" + fact + "' (facts.cc lists the facts the doctor can check)");
        }
      }
    }
    out.causes_[id] = std::move(info);
  }
  for (const auto& [code, c] : root["codes"].items()) {
    const std::string where = std::string(origin) + ": codes." + code;
    if (!c.is_object()) return Status::InvalidArgument(where + ": expected an object");
    CodeInfo info;
    info.code = code;
    info.title = StringOr(c, "title", code);
    info.meaning = StringOr(c, "meaning", "");
    info.severity = StringOr(c, "severity", "warning");
    Severity sev;
    if (!ParseSeverity(info.severity, &sev)) {
      return Status::InvalidArgument(where + ".severity: expected info, warning or critical, got '" + info.severity + "'");
    }
    Status s = StringList(c, "causes", where, &info.causes);
    if (s.ok()) s = StringList(c, "actions", where, &info.actions);
    if (s.ok()) s = StringList(c, "explains", where, &info.explains);
    if (!s.ok()) return s;
    struct Choice {
      const char* key;
      std::string* out;
      std::vector<std::string> allowed;
    };
    for (const Choice& choice : {Choice{"consequence_of", &info.consequence_of, {"broken_weights", "early_blowup"}},
                                 Choice{"loss_mark", &info.loss_mark, {"point", "range"}},
                                 Choice{"view", &info.view, {"scalars", "gradients", "activations", "performance"}}}) {
      if (!c.contains(choice.key)) continue;
      const json& v = c[choice.key];
      if (!v.is_string() || std::find(choice.allowed.begin(), choice.allowed.end(), v.get<std::string>()) ==
                                choice.allowed.end()) {
        std::string expected;
        for (const std::string& a : choice.allowed) expected += (expected.empty() ? "" : ", ") + a;
        return Status::InvalidArgument(where + "." + choice.key + ": expected one of " + expected + ", got " + v.dump());
      }
      *choice.out = v.get<std::string>();
    }
    if (c.contains("speed")) {
      if (!c["speed"].is_boolean()) return Status::InvalidArgument(where + ".speed: expected true or false");
      info.speed = c["speed"].get<bool>();
    }
    for (const std::string& cause : info.causes) {
      if (!out.causes_.count(cause)) {
        return Status::InvalidArgument(where + ".causes: unknown cause id '" + cause + "' (not under \"causes\")");
      }
    }
    out.codes_[code] = std::move(info);
  }
  for (const auto& [code, info] : out.codes_) {
    for (const std::string& other : info.explains) {
      if (!out.codes_.count(other)) {
        return Status::InvalidArgument(std::string(origin) + ": codes." + code + ".explains: unknown code '" + other + "'");
      }
    }
  }
  *kb = std::move(out);
  return Status::Ok();
}

const KnowledgeBase& KnowledgeBase::Builtin() {
  static const KnowledgeBase* kb = [] {
    auto* parsed = new KnowledgeBase;
    Status s = Parse(EmbeddedKnowledgeJson(), "data/knowledge/knowledge.json (embedded)", parsed);
    if (!s.ok()) std::fprintf(stderr, "trainscope: %s\n", s.message().c_str());
    return parsed;
  }();
  return *kb;
}

const CodeInfo* KnowledgeBase::Code(std::string_view code) const {
  auto it = codes_.find(code);
  return it == codes_.end() ? nullptr : &it->second;
}

const CauseInfo* KnowledgeBase::Cause(std::string_view id) const {
  auto it = causes_.find(id);
  return it == causes_.end() ? nullptr : &it->second;
}

std::vector<std::string> KnowledgeBase::ActionsFor(const Finding& finding, size_t max_actions) const {
  std::vector<std::string> out;
  auto add = [&](const std::string& a) {
    if (out.size() < max_actions && std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  };
  size_t used = 0;
  for (const auto& cause : finding.causes) {
    if (used >= 3 || cause.confidence < 0.2) break;
    ++used;
    if (const CauseInfo* info = Cause(cause.id)) {
      for (size_t i = 0; i < info->actions.size() && i < 2; ++i) add(info->actions[i]);
    }
  }
  if (const CodeInfo* info = Code(finding.code)) {
    for (const auto& a : info->actions) add(a);
  }
  return out;
}

}  // namespace trainscope::doctor
