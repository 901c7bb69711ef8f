#pragma once

#include <string_view>

namespace trainscope::server {

// Whether trainscope recorded this series itself (watch's bookkeeping and its optimisation
// curves: census/, grad/, update_ratio/ ...) rather than the user. The groups come from
// data/series_groups.json, which the web UI (web/src/groups.ts) bundles as well, so the
// server and the dashboard draw the same line.
bool IsTrainscopeSeries(std::string_view tag);

}  // namespace trainscope::server
