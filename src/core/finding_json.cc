#include "core/finding_json.h"

namespace trainscope {

using json = nlohmann::json;

json CausesToJson(const std::vector<Cause>& causes) {
  json out = json::array();
  for (const Cause& c : causes) out.push_back({{"id", c.id}, {"confidence", c.confidence}});
  return out;
}

json FindingToJson(const Finding& f) {
  json evidence = json::parse(f.evidence_json, nullptr, /*allow_exceptions=*/false);
  if (!evidence.is_object()) evidence = json::object();
  return {{"code", f.code},         {"severity", SeverityName(f.severity)},
          {"step", f.step},         {"last_step", f.last_step},
          {"location", f.location}, {"summary", f.summary},
          {"evidence", evidence},   {"causes", CausesToJson(f.causes)},
          {"actions", f.actions}};
}

namespace {

// One field of a finding's JSON form: absent (or null) is allowed unless the form requires
// it; present, it must have its type.
class FieldReader {
 public:
  FieldReader(const json& j, FindingFields required) : j_(j), required_(required) {}

  // The field, or nullptr when absent; *status says why it is not usable.
  const json* Find(const char* key, bool required_always, Status* status) const {
    auto it = j_.find(key);
    if (it != j_.end() && !it->is_null()) return &*it;
    if (required_always || required_ == FindingFields::kComplete) {
      *status = Status::InvalidArgument(std::string("'") + key + "' is required");
    }
    return nullptr;
  }

  Status Text(const char* key, bool required_always, std::string* out) const {
    Status status;
    const json* v = Find(key, required_always, &status);
    if (!v) return status;
    if (!v->is_string()) return Status::InvalidArgument(std::string("'") + key + "' must be a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }

  Status Integer(const char* key, int64_t* out, bool* present) const {
    Status status;
    const json* v = Find(key, false, &status);
    *present = v != nullptr;
    if (!v) return status;
    if (!v->is_number_integer()) return Status::InvalidArgument(std::string("'") + key + "' must be an integer");
    *out = v->get<int64_t>();
    return Status::Ok();
  }

 private:
  const json& j_;
  FindingFields required_;
};

Status ReadCauses(const json& causes, std::vector<Cause>* out) {
  if (!causes.is_array()) return Status::InvalidArgument("'causes' must be a list of {id, confidence}");
  for (const json& c : causes) {
    if (!c.is_object() || !c.contains("id") || !c["id"].is_string()) {
      return Status::InvalidArgument("each cause must be an object with a string 'id'");
    }
    const auto confidence = c.find("confidence");
    out->push_back({c["id"].get<std::string>(),
                    confidence != c.end() && confidence->is_number() ? confidence->get<double>() : 0.0});
  }
  return Status::Ok();
}

Status ReadActions(const json& actions, std::vector<std::string>* out) {
  if (!actions.is_array()) return Status::InvalidArgument("'actions' must be a list of strings");
  for (const json& a : actions) {
    if (!a.is_string()) return Status::InvalidArgument("'actions' must be a list of strings");
    out->push_back(a.get<std::string>());
  }
  return Status::Ok();
}

}  // namespace

Status FindingFromJson(const json& j, FindingFields required, Finding* f) {
  if (!j.is_object()) return Status::InvalidArgument("expected a JSON object");
  const FieldReader field(j, required);
  Finding out;
  Status s = field.Text("code", true, &out.code);
  if (s.ok() && out.code.empty()) s = Status::InvalidArgument("'code' is required");
  std::string severity = "warning";
  if (s.ok()) s = field.Text("severity", false, &severity);
  if (s.ok() && !ParseSeverity(severity, &out.severity)) {
    s = Status::InvalidArgument("'severity' must be info, warning or critical, got '" + severity + "'");
  }
  bool has_step = false, has_last_step = false;
  if (s.ok()) s = field.Integer("step", &out.step, &has_step);
  if (s.ok()) s = field.Integer("last_step", &out.last_step, &has_last_step);
  if (!has_last_step || out.last_step < out.step) out.last_step = out.step;
  if (s.ok()) s = field.Text("location", false, &out.location);
  if (s.ok() && required == FindingFields::kCodeOnly && !j.contains("summary")) {
    s = field.Text("message", false, &out.summary);
  } else if (s.ok()) {
    s = field.Text("summary", false, &out.summary);
  }
  if (!s.ok()) return s;
  if (auto it = j.find("evidence"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return Status::InvalidArgument("'evidence' must be an object");
    out.evidence_json = it->dump();
  }
  if (auto it = j.find("causes"); it != j.end() && !it->is_null()) {
    if (s = ReadCauses(*it, &out.causes); !s.ok()) return s;
  }
  if (auto it = j.find("actions"); it != j.end() && !it->is_null()) {
    if (s = ReadActions(*it, &out.actions); !s.ok()) return s;
  }
  *f = std::move(out);
  return Status::Ok();
}

void ReadStoredCauses(const std::string& text, std::vector<Cause>* causes) {
  const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array()) return;
  for (const auto& c : parsed) {
    if (c.is_object()) causes->push_back({c.value("id", ""), c.value("confidence", 0.0)});
  }
}

void ReadStoredActions(const std::string& text, std::vector<std::string>* actions) {
  const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array()) return;
  for (const auto& a : parsed) {
    if (a.is_string()) actions->push_back(a.get<std::string>());
  }
}

}  // namespace trainscope
