#include "doctor/rules.h"

#include <cmath>
#include <cstdlib>
#include <sys/wait.h>
#include <algorithm>

#include "core/json_number.h"
#include "core/streaming.h"
#include <fstream>
#include <set>
#include <sstream>
#include <toml.hpp>

namespace trainscope::doctor {

namespace {

Status Bad(const toml::value& v, const std::string& what, const std::string& origin) {
  // toml11 formats the message with the file, line and a caret under the value.
  return Status::InvalidArgument(origin + ": " + toml::format_error(what, v, "here"));
}

Status Number(const toml::value& v, const std::string& key, const std::string& origin, double* out) {
  if (v.is_floating()) *out = v.as_floating();
  else if (v.is_integer()) *out = static_cast<double>(v.as_integer());
  else return Bad(v, "rule key '" + key + "': expected a number", origin);
  return Status::Ok();
}

Status Integer(const toml::value& v, const std::string& key, const std::string& origin, int64_t min, int64_t* out) {
  if (!v.is_integer() || v.as_integer() < min) {
    return Bad(v, "rule key '" + key + "': expected an integer >= " + std::to_string(min), origin);
  }
  *out = v.as_integer();
  return Status::Ok();
}

Status String(const toml::value& v, const std::string& key, const std::string& origin, std::string* out) {
  if (!v.is_string()) return Bad(v, "rule key '" + key + "': expected a string", origin);
  *out = v.as_string().str;
  return Status::Ok();
}

// The statistics a rule may judge, in the order its error message lists them: the core
// ones, then the measured ones (data/tensor_stats.json).
const std::vector<std::string>& KnownStats() {
  static const std::vector<std::string> stats = [] {
    std::vector<std::string> all = {"l2_norm", "abs_max", "mean", "std", "min", "max", "nonfinite", "zeros_fraction"};
    for (const tensor_stats::MeasuredStat* stat : tensor_stats::kMeasured) all.emplace_back(stat->name);
    return all;
  }();
  return stats;
}

std::string KnownStatsList() {
  std::string list;
  for (const std::string& stat : KnownStats()) list += (list.empty() ? "" : ", ") + stat;
  return list;
}

Status ParseRule(const toml::value& t, const std::string& origin, AlertRule* r) {
  if (!t.is_table()) return Bad(t, "each [[rule]] must be a table", origin);
  bool has_condition = false;
  for (const auto& [key, v] : t.as_table()) {
    Status s;
    double d = 0;
    int64_t i = 0;
    if (key == "name") s = String(v, key, origin, &r->name);
    else if (key == "series") s = String(v, key, origin, &r->series);
    else if (key == "stat") {
      s = String(v, key, origin, &r->stat);
      if (s.ok() && std::find(KnownStats().begin(), KnownStats().end(), r->stat) == KnownStats().end()) {
        s = Bad(v, "rule key 'stat': expected one of " + KnownStatsList(), origin);
      }
    } else if (key == "above" || key == "below" || key == "above_ema" || key == "below_ema" ||
               key == "above_median" || key == "below_median" || key == "rate_above" || key == "rate_below") {
      s = Number(v, key, origin, &d);
      has_condition = true;
      if (key == "above") r->above = d;
      if (key == "below") r->below = d;
      if (key == "above_ema") r->above_ema = d;
      if (key == "below_ema") r->below_ema = d;
      if (key == "above_median") r->above_median = d;
      if (key == "below_median") r->below_median = d;
      if (key == "rate_above") r->rate_above = d;
      if (key == "rate_below") r->rate_below = d;
    } else if (key == "no_improvement") {
      s = Integer(v, key, origin, 1, &i);
      r->no_improvement = i;
      has_condition = true;
    } else if (key == "mode") {
      std::string mode;
      s = String(v, key, origin, &mode);
      if (s.ok() && mode != "min" && mode != "max") s = Bad(v, "rule key 'mode': expected \"min\" or \"max\"", origin);
      r->maximize = mode == "max";
    } else if (key == "min_delta") {
      s = Number(v, key, origin, &r->min_delta);
    } else if (key == "nonfinite") {
      if (!v.is_boolean()) s = Bad(v, "rule key 'nonfinite': expected true or false", origin);
      else r->nonfinite = v.as_boolean();
      has_condition = has_condition || r->nonfinite;
    } else if (key == "ema") {
      s = Number(v, key, origin, &r->ema_weight);
      if (s.ok() && !(r->ema_weight > 0 && r->ema_weight < 1)) s = Bad(v, "rule key 'ema': expected a weight in (0, 1)", origin);
    } else if (key == "window") {
      s = Integer(v, key, origin, 1, &i);
      r->window = static_cast<size_t>(i);
    } else if (key == "for") {
      s = Integer(v, key, origin, 1, &i);
      r->for_points = static_cast<size_t>(i);
    } else if (key == "cooldown") {
      s = Integer(v, key, origin, 0, &r->cooldown);
    } else if (key == "severity") {
      std::string sev;
      s = String(v, key, origin, &sev);
      if (s.ok() && !ParseSeverity(sev, &r->severity)) s = Bad(v, "rule key 'severity': expected info, warning or critical", origin);
    } else if (key == "actions") {
      if (!v.is_array()) {
        s = Bad(v, "rule key 'actions': expected a list such as [\"print\", \"stop\"]", origin);
      } else {
        for (const auto& a : v.as_array()) {
          std::string name;
          s = String(a, key, origin, &name);
          if (!s.ok()) break;
          if (name != "print" && name != "stop" && name != "callback" && name != "pdb" && name != "shell") {
            s = Bad(a, "unknown action '" + name + "': expected print, stop, callback, pdb or shell", origin);
            break;
          }
          r->actions.push_back(name);
        }
      }
    } else if (key == "shell") {
      s = String(v, key, origin, &r->shell);
    } else if (key == "callback") {
      s = String(v, key, origin, &r->callback);
    } else if (key == "message") {
      s = String(v, key, origin, &r->message);
    } else {
      s = Bad(v, "unknown rule key '" + key + "'", origin);
    }
    if (!s.ok()) return s;
  }
  if (r->series.empty()) return Bad(t, "a rule needs series = \"<tag>\"", origin);
  if (!has_condition) {
    return Bad(t, "a rule needs a condition: above, below, above_ema, below_ema, above_median, below_median, "
                  "no_improvement, rate_above, rate_below or nonfinite", origin);
  }
  if (r->name.empty()) r->name = r->series;
  if (!r->shell.empty() && std::find(r->actions.begin(), r->actions.end(), "shell") == r->actions.end()) {
    r->actions.push_back("shell");
  }
  if (!r->callback.empty() && std::find(r->actions.begin(), r->actions.end(), "callback") == r->actions.end()) {
    r->actions.push_back("callback");
  }
  if (r->actions.empty()) r->actions.push_back("print");
  return Status::Ok();
}

std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
  return s;
}

std::string FormatValue(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string Expand(const std::string& text, const Alert& a) {
  std::string s = ReplaceAll(text, "{rule}", a.rule);
  s = ReplaceAll(s, "{series}", a.series);
  s = ReplaceAll(s, "{step}", std::to_string(a.step));
  return ReplaceAll(s, "{value}", FormatValue(a.value));
}

}  // namespace

Status ParseRules(std::string_view text, std::string_view origin_view, std::vector<AlertRule>* rules) {
  const std::string origin(origin_view);
  rules->clear();
  toml::value root;
  try {
    std::istringstream in{std::string(text)};
    root = toml::parse(in, origin);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("rules file: ") + e.what());
  }
  try {
    for (const auto& [key, v] : root.as_table()) {
      if (key != "rule") return Bad(v, "unknown top-level key '" + key + "' (rules are [[rule]] tables)", origin);
      if (!v.is_array()) return Bad(v, "'rule' must be an array of tables: write [[rule]]", origin);
      for (const auto& t : v.as_array()) {
        AlertRule r;
        Status s = ParseRule(t, origin, &r);
        if (!s.ok()) return s;
        rules->push_back(std::move(r));
      }
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(origin + ": " + e.what());
  }
  return Status::Ok();
}

Status LoadRulesFile(const std::string& path, std::vector<AlertRule>* rules) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path + ": cannot open the rules file");
  std::stringstream buf;
  buf << in.rdbuf();
  return ParseRules(buf.str(), path, rules);
}

bool SeriesMatches(std::string_view pattern, std::string_view tag) {
  if (!pattern.empty() && pattern.back() == '*') {
    const std::string_view prefix = pattern.substr(0, pattern.size() - 1);
    return tag.substr(0, prefix.size()) == prefix;
  }
  return pattern == tag;
}

double TensorStatValue(const TensorStats& s, std::string_view stat) {
  if (stat.empty() || stat == "l2_norm") return s.nan + s.inf ? std::numeric_limits<double>::quiet_NaN() : s.l2_norm();
  if (stat == "abs_max") return s.abs_max;
  if (stat == "mean") return s.mean();
  if (stat == "std") return s.stddev();
  if (stat == "min") return s.min;
  if (stat == "max") return s.max;
  if (stat == "nonfinite") return static_cast<double>(s.nan + s.inf);
  if (stat == "zeros_fraction") return s.numel ? static_cast<double>(s.zeros) / static_cast<double>(s.numel) : 0;
  if (const tensor_stats::MeasuredStat* measured = tensor_stats::FindMeasured(stat)) return s.*measured->field;
  return std::numeric_limits<double>::quiet_NaN();
}

RuleEngine::RuleEngine(std::vector<AlertRule> rules) : rules_(std::move(rules)) {}

void RuleEngine::OnScalar(std::string_view tag, int64_t step, double, double value) {
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (rules_[i].stat.empty() && SeriesMatches(rules_[i].series, tag)) Evaluate(i, tag, step, value);
  }
}

void RuleEngine::OnTensorStats(std::string_view tag, int64_t step, double, const TensorStats& stats) {
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (SeriesMatches(rules_[i].series, tag)) Evaluate(i, tag, step, TensorStatValue(stats, rules_[i].stat));
  }
}

void RuleEngine::Evaluate(size_t index, std::string_view tag, int64_t step, double x) {
  const AlertRule& r = rules_[index];
  State& st = state_[std::to_string(index) + '\n' + std::string(tag)];
  const bool finite = std::isfinite(x);
  // Every condition given must hold; references (EMA, median, best, previous) are taken
  // before this value joins them.
  bool hold = true;
  if (r.nonfinite) hold = hold && !finite;
  if (r.above) hold = hold && finite && x > *r.above;
  if (r.below) hold = hold && finite && x < *r.below;
  if (r.above_ema || r.below_ema) {
    const double ema = st.ema_count ? st.ema_biased / (1 - st.ema_power) : std::numeric_limits<double>::quiet_NaN();
    if (r.above_ema) hold = hold && finite && st.ema_count > 0 && x > *r.above_ema * ema;
    if (r.below_ema) hold = hold && finite && st.ema_count > 0 && x < *r.below_ema * ema;
  }
  if (r.above_median || r.below_median) {
    std::vector<double> w(st.window.begin(), st.window.end());
    const double med = Median(w);
    const bool ready = st.window.size() >= std::min<size_t>(r.window, 5);
    if (r.above_median) hold = hold && finite && ready && x > *r.above_median * med;
    if (r.below_median) hold = hold && finite && ready && x < *r.below_median * med;
  }
  if (r.rate_above || r.rate_below) {
    const double rate = st.has_prev && step != st.prev_step ? (x - st.prev) / static_cast<double>(step - st.prev_step)
                                                           : std::numeric_limits<double>::quiet_NaN();
    if (r.rate_above) hold = hold && std::isfinite(rate) && rate > *r.rate_above;
    if (r.rate_below) hold = hold && std::isfinite(rate) && rate < *r.rate_below;
  }
  if (finite) {
    const bool better = std::isnan(st.best) || (r.maximize ? x > st.best + r.min_delta : x < st.best - r.min_delta);
    if (better) {
      st.best = x;
      st.best_step = step;
    }
    if (r.no_improvement) hold = hold && !better && step - st.best_step >= *r.no_improvement;
    st.ema_biased = r.ema_weight * st.ema_biased + (1 - r.ema_weight) * x;
    st.ema_power *= r.ema_weight;
    ++st.ema_count;
    st.window.push_back(x);
    if (st.window.size() > r.window) st.window.pop_front();
    st.has_prev = true;
    st.prev = x;
    st.prev_step = step;
  } else if (r.no_improvement) {
    hold = false;
  }
  st.streak = hold ? st.streak + 1 : 0;
  if (st.streak < r.for_points) return;
  if (st.last_fired != std::numeric_limits<int64_t>::min() && step - st.last_fired < r.cooldown) return;
  st.last_fired = step;
  Alert a;
  a.rule = r.name;
  a.series = std::string(tag);
  a.severity = r.severity;
  a.step = step;
  a.value = x;
  a.actions = r.actions;
  a.shell = r.shell;
  a.callback = r.callback;
  a.message = r.message.empty() ? "rule '" + r.name + "': " + a.series + " = " + FormatValue(x) + " at step " +
                                      std::to_string(step)
                                : Expand(r.message, a);
  for (const auto& action : a.actions) {
    if (action == "stop") stop_requested_ = true;
  }
  pending_.push_back(std::move(a));
}

std::vector<Alert> RuleEngine::TakeAlerts() {
  std::vector<Alert> out;
  out.swap(pending_);
  return out;
}

int RunShellAction(const Alert& a) {
  if (a.shell.empty()) return -1;
  setenv("TRAINSCOPE_ALERT_RULE", a.rule.c_str(), 1);
  setenv("TRAINSCOPE_ALERT_SERIES", a.series.c_str(), 1);
  setenv("TRAINSCOPE_ALERT_STEP", std::to_string(a.step).c_str(), 1);
  setenv("TRAINSCOPE_ALERT_VALUE", FormatValue(a.value).c_str(), 1);
  setenv("TRAINSCOPE_ALERT_SEVERITY", SeverityName(a.severity), 1);
  const int rc = std::system(Expand(a.shell, a).c_str());
  if (rc == -1) return -1;
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

Finding AlertToFinding(const Alert& a) {
  Finding f;
  f.code = "USER_ALERT";
  f.severity = a.severity;
  f.step = f.last_step = a.step;
  f.location = a.series;
  f.summary = a.message;
  const nlohmann::json evidence = {{"rule", a.rule}, {"value", JsonNumber(a.value)}};
  f.evidence_json = evidence.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return f;
}

}  // namespace trainscope::doctor
