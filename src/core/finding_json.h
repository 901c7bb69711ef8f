// A finding's JSON form (DESIGN.md: {"code", "severity", "step", "last_step", "location",
// "summary", "evidence", "causes", "actions"}): the one writer and the one reader, shared by
// the doctor's `diagnose --json`, the stores, the server's API and ingest, the forwarder and
// the Python binding. Its own small library (trainscope_finding_json) so that
// trainscope_core stays standard-library only.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/sample.h"
#include "core/status.h"

namespace trainscope {

// Evidence is the finding's JSON object (an unparsable one becomes {}).
nlohmann::json FindingToJson(const Finding& finding);
// [{"id", "confidence"}, ...]: a finding's causes, as JSON and as stored.
nlohmann::json CausesToJson(const std::vector<Cause>& causes);

// What a reader insists on. kComplete: every field as FindingToJson writes it (a stored or
// forwarded finding). kCodeOnly: a finding a user's code hands in, where only "code" is
// required: severity defaults to warning, step to 0, last_step to step, the rest to empty,
// and "summary" may be called "message".
enum class FindingFields { kComplete, kCodeOnly };

// FindingToJson's form read back. A field present must have its type (null counts as
// absent); a failure names the field and what was expected ("'step' must be an integer").
// A last_step before step reads as step: a finding's range cannot end before it starts.
Status FindingFromJson(const nlohmann::json& j, FindingFields required, Finding* finding);

// A finding's causes and actions as a store keeps them (CausesToJson's text, a JSON array of
// strings), read back; entries of another shape are left out.
void ReadStoredCauses(const std::string& text, std::vector<Cause>* causes);
void ReadStoredActions(const std::string& text, std::vector<std::string>* actions);

}  // namespace trainscope
