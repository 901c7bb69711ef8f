// YAML documents (W&B config.yaml, MLflow meta.yaml) as JSON values, through libyaml's
// event parser: mappings -> objects, sequences -> arrays, plain scalars -> null, bool or
// number when they read as one, else strings; quoted scalars stay strings. Anchors and
// aliases become null (neither writer uses them). Nesting is capped (64) so a hostile
// file cannot exhaust the stack.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace trainscope::ingest {

// The first document of text. Errors name the file, the line and column, and the problem.
Status ParseYaml(std::string_view text, const std::string& name, nlohmann::json* out);

}  // namespace trainscope::ingest
