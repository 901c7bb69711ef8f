// The JSON forms of the sample model that users and tests rely on (DESIGN.md contracts):
// one place, shared by the CLI, the server and the report.
#pragma once

#include <nlohmann/json.hpp>

#include "core/finding_json.h"  // FindingToJson, FindingFromJson: the finding's one form
#include "core/json_number.h"   // JsonNumber: the one NaN/Inf-to-JSON rule
#include "core/sample.h"
#include "store/run_store.h"

namespace trainscope {

nlohmann::json TensorStatsToJson(const TensorStats& stats);
nlohmann::json RunMetaToJson(const RunMeta& meta, const std::string& effective_status);

}  // namespace trainscope
