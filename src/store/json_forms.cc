#include "store/json_forms.h"

#include <cmath>

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
  const json causes = CausesToJson(f.causes);
  return {{"code", f.code},         {"severity", SeverityName(f.severity)},
          {"step", f.step},         {"last_step", f.last_step},
          {"location", f.location}, {"summary", f.summary},
          {"evidence", evidence},   {"causes", causes},
          {"actions", f.actions}};
}

Status FindingFromJson(const json& j, Finding* f) {
  if (!j.is_object()) return Status::InvalidArgument("a finding: expected an object");
  const char* const kText[] = {"code", "severity", "location", "summary"};
  for (const char* key : kText) {
    if (!j.contains(key) || !j[key].is_string()) {
      return Status::InvalidArgument(std::string("a finding: expected \"") + key + "\" as a string");
    }
  }
  for (const char* key : {"step", "last_step"}) {
    if (!j.contains(key) || !j[key].is_number_integer()) {
      return Status::InvalidArgument(std::string("a finding: expected \"") + key + "\" as an integer");
    }
  }
  *f = Finding();
  f->code = j["code"].get<std::string>();
  if (!ParseSeverity(j["severity"].get<std::string>(), &f->severity)) {
    return Status::InvalidArgument("a finding: severity '" + j["severity"].get<std::string>() +
                                   "', expected info, warning or critical");
  }
  f->step = j["step"].get<int64_t>();
  f->last_step = j["last_step"].get<int64_t>();
  f->location = j["location"].get<std::string>();
  f->summary = j["summary"].get<std::string>();
  f->evidence_json = j.contains("evidence") && j["evidence"].is_object() ? j["evidence"].dump() : "{}";
  if (j.contains("causes")) ReadStoredCauses(j["causes"].dump(), &f->causes);
  if (j.contains("actions")) ReadStoredActions(j["actions"].dump(), &f->actions);
  return Status::Ok();
}

json TensorStatsToJson(const TensorStats& s) {
  json out = {{"numel", s.numel},
              {"nan", s.nan},
              {"inf", s.inf},
              {"zeros", s.zeros},
              {"min", JsonNumber(s.min)},
              {"max", JsonNumber(s.max)},
              {"mean", JsonNumber(s.mean())},
              {"std", JsonNumber(s.stddev())},
              {"abs_max", JsonNumber(s.abs_max)},
              {"l2_norm", JsonNumber(s.l2_norm())}};
  for (const tensor_stats::MeasuredStat* stat : tensor_stats::kMeasured) {
    if (const double value = s.*stat->field; !std::isnan(value)) out[std::string(stat->name)] = value;
  }
  if (s.has_histogram) {
    out["exponent_min"] = TensorStats::kMinExponent;
    out["exponent_counts"] = s.exponent_counts;
  }
  return out;
}

json RunMetaToJson(const RunMeta& m, const std::string& effective_status) {
  json config = json::parse(m.config_json, nullptr, false);
  if (config.is_discarded()) config = m.config_json;
  json out = {{"name", m.name},
              {"status", effective_status},
              {"start_time", m.start_time},
              {"end_time", m.end_time},
              {"host", m.host},
              {"pid", m.pid},
              {"config", config},
              {"command_line", m.command_line},
              {"git_commit", m.git_commit},
              {"exit_reason", m.exit_reason},
              {"heartbeat", m.heartbeat},
              {"dropped_points", m.dropped_points},
              {"backward_steps", m.backward_steps}};
  for (const auto& [key, value] : m.extra) out["extra"][key] = value;
  return out;
}

void ReadStoredCauses(const std::string& text, std::vector<Cause>* causes) {
  const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array()) return;
  for (const auto& c : parsed) {
    if (c.is_object()) causes->push_back({c.value("id", ""), c.value("confidence", 0.0)});
  }
}

void ReadStoredActions(const std::string& text, std::vector<std::string>* actions) {
  const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array()) return;
  for (const auto& a : parsed) {
    if (a.is_string()) actions->push_back(a.get<std::string>());
  }
}

}  // namespace trainscope
