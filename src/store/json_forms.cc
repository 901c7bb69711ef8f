#include "store/json_forms.h"

#include <cmath>

namespace trainscope {

using json = nlohmann::json;

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

}  // namespace trainscope
