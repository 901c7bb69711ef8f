// The JSON forms of the sample model that users and tests rely on (DESIGN.md contracts):
// one place, shared by the CLI, the server and the report.
#pragma once

#include <nlohmann/json.hpp>

#include "core/json_number.h"  // JsonNumber: the one NaN/Inf-to-JSON rule
#include "core/sample.h"
#include "store/run_store.h"

namespace trainscope {

// {"code", "severity", "step", "last_step", "location", "summary", "evidence", "causes",
//  "actions"}; evidence is the finding's JSON object (an unparsable one becomes {}).
nlohmann::json FindingToJson(const Finding& finding);
// FindingToJson's form read back; fails naming the field that is missing or of another type.
Status FindingFromJson(const nlohmann::json& j, Finding* finding);
// [{"id", "confidence"}, ...]: a finding's causes, as JSON and as stored.
nlohmann::json CausesToJson(const std::vector<Cause>& causes);
// A finding's causes and actions as a store keeps them (CausesToJson's text, a JSON array of
// strings), read back; entries of another shape are left out.
void ReadStoredCauses(const std::string& text, std::vector<Cause>* causes);
void ReadStoredActions(const std::string& text, std::vector<std::string>* actions);
nlohmann::json TensorStatsToJson(const TensorStats& stats);
nlohmann::json RunMetaToJson(const RunMeta& meta, const std::string& effective_status);

}  // namespace trainscope
