// What the runs list says of a run (/api/runs): its health, from its findings and status,
// and which series' last values it carries.
#pragma once

#include <string>
#include <vector>

#include "core/sample.h"
#include "store/run_store.h"

namespace trainscope::read {

// "critical", "warning" or "ok": the worst finding above info; a crashed run is critical
// whatever its findings said (it did not finish).
const char* RunHealth(const std::vector<Finding>& findings, const std::string& status);

// The scalar series (with points) whose last value the list shows, at most `limit`: the
// user's own first, then trainscope's (census/, input/, opt/, grad/, update_ratio/ ...: one per
// parameter on a big model), so the ones kept always hold the user's metrics; never the
// host's and process's (sys/, mem/, time/).
std::vector<const SeriesInfo*> FinalValueSeries(const std::vector<SeriesInfo>& series, size_t limit);

}  // namespace trainscope::read
