#include "doctor/doctor.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <unordered_set>

#include "core/finding_json.h"
#include "core/tag.h"
#include "doctor/facts.h"
#include "doctor/knowledge.h"
#include "doctor/param_roles.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

}  // namespace

// ---- Doctor ----

Doctor::Doctor(DoctorOptions options)
    : options_(std::move(options)), flight_(options_.flight_recorder_steps), lag_(options_.lag_steps) {
  std::vector<std::unique_ptr<Detector>> all = MakeDetectors(options_);
  for (auto& d : all) {
    specs_.push_back(d->spec());  // not_checked speaks for every detector, run or not
    if (options_.only.empty() || options_.only.count(d->name())) detectors_.push_back(std::move(d));
  }
}

Doctor::~Doctor() = default;

std::vector<std::string> Doctor::detector_names() const {
  std::vector<std::string> names;
  for (const auto& d : detectors_) names.push_back(d->name());
  return names;
}

std::string_view Doctor::Intern(std::string_view tag) {
  auto it = tag_names_.find(tag);
  if (it == tag_names_.end()) it = tag_names_.emplace(tag).first;
  return *it;
}

StepFrame& Doctor::FrameFor(int64_t step, double wall_time, bool* accepted) {
  static thread_local StepFrame discard;
  *accepted = !finished_ && step > judged_through_;
  if (!*accepted) {
    ++late_samples_;
    if (!finished_ && !open_.empty()) {
      const int64_t needed = open_.rbegin()->first - step + 1;
      lag_ = std::max(lag_, std::min(needed, options_.max_lag_steps));
    }
    discard = StepFrame();
    return discard;
  }
  auto [it, added] = open_.try_emplace(step);
  if (added) it->second.step = step;
  it->second.wall_time = std::max(it->second.wall_time, wall_time);
  return it->second;
}

void Doctor::OnScalar(std::string_view tag, int64_t step, double wall_time, double value) {
  bool ok;
  StepFrame& f = FrameFor(step, wall_time, &ok);
  if (!ok) return;
  f.scalars.emplace_back(Intern(tag), value);
  JudgeReadyFrames();
}

void Doctor::OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) {
  bool ok;
  StepFrame& f = FrameFor(step, wall_time, &ok);
  if (!ok) return;
  f.stats.emplace_back(std::string(tag), stats);
  JudgeReadyFrames();
}

void Doctor::OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) {
  bool ok;
  StepFrame& f = FrameFor(step, wall_time, &ok);
  if (!ok) return;
  f.vectors.emplace_back(std::string(tag), values);
  JudgeReadyFrames();
}

void Doctor::OnSpan(const Span& span) {
  bool ok;
  StepFrame& f = FrameFor(span.step, span.start + span.duration, &ok);
  if (!ok) return;
  f.spans.push_back(span);
  JudgeReadyFrames();
}

void Doctor::OnFinding(const Finding& finding) { recorded_.push_back(finding); }

void Doctor::EndBatch() { JudgeReadyFrames(/*batch_end=*/true); }

void Doctor::JudgeReadyFrames(bool batch_end) {
  if (!options_.streaming || open_.empty() || finished_) return;
  if (options_.judge_at_batch_end && !batch_end) return;
  const int64_t newest = open_.rbegin()->first;
  while (!open_.empty() && open_.begin()->first < newest - lag_) {
    StepFrame frame = std::move(open_.begin()->second);
    open_.erase(open_.begin());
    Judge(frame);
  }
}

void Doctor::Judge(const StepFrame& frame) {
  judging_step_ = frame.step;
  judged_through_ = std::max(judged_through_, frame.step);
  UpdateFacts(frame);
  flight_.Add(frame);
  if (!std::isnan(facts_.grad_norm)) flight_.AddGradNorm(frame.step, facts_.grad_norm);
  const DetectorContext ctx = Context();
  for (auto& d : detectors_) {
    if (d->judges_loss_progress() && LossIsNotProgress()) continue;
    d->OnStep(frame, ctx);
  }
  ++facts_.steps_seen;
}

void Doctor::Hold(Finding finding) {
  auto key = std::make_pair(finding.code, finding.location);
  auto it = held_.find(key);
  if (it == held_.end()) {
    json evidence = json::parse(finding.evidence_json.empty() ? "{}" : finding.evidence_json, nullptr, false);
    if (evidence.is_object()) {
      evidence["detected_at"] = judging_step_;  // when it was seen, not the end of the run
      finding.evidence_json = evidence.dump();
    }
    held_.emplace(std::move(key), std::move(finding));
    return;
  }
  Finding& held = it->second;
  held.last_step = std::max(held.last_step, finding.last_step);
  if (finding.severity > held.severity) {
    // Worse now: its severity and summary, the first sighting's evidence (and its date).
    finding.evidence_json = held.evidence_json;
    if (finding.summary.empty()) finding.summary = held.summary;
    if (finding.causes.empty()) finding.causes = held.causes;
    held = std::move(finding);
  }
}

std::optional<Finding> Doctor::DetectorSink::TakeHeld(const std::string& code, const std::string& location) {
  auto it = doctor_->held_.find(std::make_pair(code, location));
  if (it == doctor_->held_.end()) return std::nullopt;
  Finding finding = std::move(it->second);
  doctor_->held_.erase(it);
  return finding;
}

void Doctor::Report(Finding finding, bool amend) {
  RankCauses(&finding.causes);
  const auto key = std::make_pair(finding.code, finding.location);
  auto it = open_findings_.find(key);
  if (it != open_findings_.end()) {
    Finding& open = findings_[it->second];
    open.last_step = std::max(open.last_step, std::max(finding.last_step, finding.step));
    if (amend) {
      json old_evidence = json::parse(open.evidence_json, nullptr, false);
      json evidence = json::parse(finding.evidence_json, nullptr, false);
      if (!evidence.is_object()) evidence = json::object();
      if (old_evidence.is_object() && old_evidence.contains("detected_at")) evidence["detected_at"] = old_evidence["detected_at"];
      open.evidence_json = evidence.dump();
      open.summary = finding.summary;
      open.causes = finding.causes;
      open.severity = std::max(open.severity, finding.severity);
      ApplyDifferential(&open, facts_, KnowledgeBase::Builtin());
      open.actions = finding.actions.empty() ? KnowledgeBase::Builtin().ActionsFor(open) : finding.actions;
      FitActionsToFacts(&open, facts_);
      return;
    }
    if (finding.severity > open.severity) {
      open.severity = finding.severity;
      open.summary = finding.summary;
    }
    return;
  }
  if (IsConsequence(finding)) return;
  if (finding.last_step < finding.step) finding.last_step = finding.step;
  // When the doctor knew (the step being judged), next to when the problem began (step):
  // the difference is the detection delay.
  json evidence = json::parse(finding.evidence_json, nullptr, false);
  if (!evidence.is_object()) evidence = json::object();
  // A detector that judged with hindsight (offline, at the end) says when the data first
  // showed it; otherwise it is now.
  if (!evidence.contains("detected_at")) evidence["detected_at"] = judging_step_;
  finding.evidence_json = evidence.dump();
  ApplyDifferential(&finding, facts_, KnowledgeBase::Builtin());
  if (finding.actions.empty()) finding.actions = KnowledgeBase::Builtin().ActionsFor(finding);
  FitActionsToFacts(&finding, facts_);
  open_findings_[key] = findings_.size();
  const bool weights_gone = HasPrefix(finding.code, "NONFINITE_") && finding.severity == Severity::kCritical;
  const bool blown_up = finding.code == "LOSS_DIVERGENCE" && evidence.value("early_blowup", false);
  if (root_ == static_cast<size_t>(-1) && (weights_gone || blown_up)) root_ = findings_.size();
  findings_.push_back(finding);
  if (options_.on_finding) options_.on_finding(findings_.back());
}

namespace {

// What follows when the weights are non-finite or were blown up by the first updates (the
// loss stays at one level, gradients vanish, units die, the accuracy stalls at one class;
// after a blow-up, later updates round away in the huge weights): knowledge.json's
// "consequence_of".
bool IsConsequenceCode(const std::string& code, bool blown_up) {
  const CodeInfo* info = KnowledgeBase::Builtin().Code(code);
  if (info == nullptr) return false;
  return info->consequence_of == "broken_weights" || (blown_up && info->consequence_of == "early_blowup");
}

// Script already clips: the clip is named in the finding's evidence (the advice to clip is
// dropped by FitActionsToFacts).
void NoteClipping(Finding* finding, double clip_norm) {
  if (clip_norm <= 0) return;
  json evidence = json::parse(finding->evidence_json, nullptr, false);
  if (!evidence.is_object()) return;
  evidence["gradient_clipping"] = Num(clip_norm);
  finding->evidence_json = evidence.dump();
}

}  // namespace

bool Doctor::IsConsequence(const Finding& finding) {
  if (root_ == static_cast<size_t>(-1)) return false;
  Finding& root = findings_[root_];
  const bool blown_up = root.code == "LOSS_DIVERGENCE";
  if (!IsConsequenceCode(finding.code, blown_up)) return false;
  // Non-finite weights: only while the loss is still non-finite (a run that recovered,
  // say after a skipped step, is judged again).
  if (!blown_up && !facts_.loss_nonfinite && facts_.roles.Has(Role::kLoss)) return false;
  json evidence = json::parse(root.evidence_json, nullptr, false);
  if (!evidence.is_object()) return true;
  json& list = evidence["consequences"];
  if (!list.is_array()) list = json::array();
  for (const json& c : list) {
    if (c.value("code", "") == finding.code && c.value("location", "") == finding.location) return true;
  }
  if (list.size() < 20) list.push_back({{"code", finding.code}, {"location", finding.location}, {"step", finding.step}});
  root.evidence_json = evidence.dump();
  return true;
}

namespace {

// The median of the last tenth (at least 5) of a series' finite points; NaN without any.
double EndLevel(std::vector<double> values) {
  if (values.empty()) return kNaN;
  const size_t n = std::min(values.size(), std::max<size_t>(5, values.size() / 10));
  std::vector<double> tail(values.end() - static_cast<std::ptrdiff_t>(n), values.end());
  std::nth_element(tail.begin(), tail.begin() + static_cast<std::ptrdiff_t>(n / 2), tail.end());
  return tail[n / 2];
}

}  // namespace

void Doctor::PrepareOffline(const std::vector<ScalarStart>& scalars, const SeriesPoints& points_of) {
  // The tags in the order a step-by-step reading first meets them: by their first step,
  // then in series order (as Finish's reading of the held steps would).
  std::vector<ScalarStart> firsts = scalars;
  std::stable_sort(firsts.begin(), firsts.end(), [](const auto& a, const auto& b) { return a.first_step < b.first_step; });
  RoleResolver roles = facts_.roles;
  for (const ScalarStart& series : firsts) {
    if (facts_.rl_tag.empty() && IsReinforcementLearningTag(series.tag)) facts_.rl_tag = series.tag;
    roles.See(series.tag);
  }
  // The loss at each step: its last value logged at that step (StepFrame::Scalar).
  std::vector<double> loss;
  const std::string& loss_tag = roles.Get(Role::kLoss);
  if (!loss_tag.empty()) {
    std::vector<int64_t> steps;
    std::vector<double> values;
    points_of(loss_tag, &steps, &values);
    std::map<int64_t, double> last_at_step;
    for (size_t i = 0; i < steps.size() && i < values.size(); ++i) last_at_step[steps[i]] = values[i];
    for (const auto& [step, value] : last_at_step) {
      if (std::isfinite(value)) loss.push_back(value);
    }
  }
  facts_.loss_end_level = EndLevel(std::move(loss));
  prepared_ = true;
}

void Doctor::JudgeThrough(int64_t step) {
  while (!open_.empty() && open_.begin()->first <= step) {
    StepFrame frame = std::move(open_.begin()->second);
    open_.erase(open_.begin());
    Judge(frame);
  }
}

void Doctor::Finish() {
  if (finished_) return;
  if (!options_.streaming && !prepared_) {
    // Offline the whole run is known: whether it is reinforcement learning is decided before
    // its first step is judged (its return may be logged later than its loss).
    // Each tag is looked at once: matching a tag against the role patterns costs far more
    // than a set lookup, and a run has few tags and many points.
    RoleResolver roles = facts_.roles;
    std::unordered_set<std::string_view> seen;
    for (const auto& [step, frame] : open_) {
      for (const auto& [tag, value] : frame.scalars) {
        if (!seen.insert(tag).second) continue;
        if (facts_.rl_tag.empty() && IsReinforcementLearningTag(tag)) facts_.rl_tag = tag;
        roles.See(tag);
      }
    }
    std::vector<double> loss;
    const std::string& loss_tag = roles.Get(Role::kLoss);
    for (const auto& [step, frame] : open_) {
      const double* v = loss_tag.empty() ? nullptr : frame.Scalar(loss_tag);
      if (v && std::isfinite(*v)) loss.push_back(*v);
    }
    facts_.loss_end_level = EndLevel(std::move(loss));
  }
  while (!open_.empty()) {
    StepFrame frame = std::move(open_.begin()->second);
    open_.erase(open_.begin());
    Judge(frame);
  }
  const DetectorContext ctx = Context();
  for (auto& d : detectors_) {
    if (d->judges_loss_progress() && LossIsNotProgress()) continue;
    d->Finish(ctx);
  }
  finished_ = true;
}

namespace {

// The consistency pass: one series does not get findings that contradict each other. A
// loss cannot be stuck (LOSS_PLATEAU) and climbing (LOSS_DIVERGENCE) over the same run:
// the more severe finding stays, on a tie the divergence (a climb out of a flat start is a
// divergence). A validation loss at chance level is not over-fitting: the plateau stays.
// What was dropped is kept in the survivor's evidence ("contradicted": code, summary).
void ResolveContradictions(std::vector<Finding>* findings) {
  struct Rule {
    const char* a;
    const char* b;
    const char* keep_on_tie;
  };
  static const Rule kRules[] = {{"LOSS_PLATEAU", "LOSS_DIVERGENCE", "LOSS_DIVERGENCE"},
                                {"LOSS_PLATEAU", "OVERFITTING", "LOSS_PLATEAU"}};
  std::vector<bool> drop(findings->size(), false);
  for (const Rule& rule : kRules) {
    for (size_t i = 0; i < findings->size(); ++i) {
      Finding& x = (*findings)[i];
      if (drop[i] || x.code != rule.a) continue;
      for (size_t j = 0; j < findings->size(); ++j) {
        Finding& y = (*findings)[j];
        if (drop[j] || y.code != rule.b || y.location != x.location) continue;
        const bool keep_x = x.severity != y.severity ? x.severity > y.severity : x.code == rule.keep_on_tie;
        Finding& kept = keep_x ? x : y;
        const Finding& gone = keep_x ? y : x;
        json evidence = json::parse(kept.evidence_json, nullptr, false);
        if (!evidence.is_object()) evidence = json::object();
        if (!evidence.contains("contradicted")) evidence["contradicted"] = json::array();
        evidence["contradicted"].push_back({{"code", gone.code}, {"step", gone.step}, {"summary", gone.summary}});
        kept.evidence_json = evidence.dump();
        drop[keep_x ? j : i] = true;
        if (!keep_x) break;
      }
    }
  }
  std::vector<Finding> out;
  for (size_t i = 0; i < findings->size(); ++i) {
    if (!drop[i]) out.push_back(std::move((*findings)[i]));
  }
  *findings = std::move(out);
}

// A crash about a number that overflowed or went NaN (RUN_CRASHED's evidence.numeric) after
// the loss or the gradients blew up is what the blow-up left: the finding that blew up
// ended the run (critical, so it comes first) and the crash says what it follows. A
// perplexity's math.exp of a diverged loss, sampling from NaN probabilities after training.
void LinkCrashToBlowUp(std::vector<Finding>* findings) {
  static const char* const kBlowUps[] = {"NONFINITE_LOSS", "NONFINITE_GRAD", "LOSS_DIVERGENCE", "GRAD_EXPLOSION"};
  for (Finding& crash : *findings) {
    if (crash.code != "RUN_CRASHED") continue;
    json ev = json::parse(crash.evidence_json, nullptr, false);
    if (!ev.is_object() || !ev.value("numeric", false)) continue;
    Finding* root = nullptr;
    for (const char* code : kBlowUps) {
      for (Finding& f : *findings) {
        if (f.code == code && f.severity >= Severity::kWarning && f.step <= crash.step && (!root || f.step < root->step)) {
          root = &f;
        }
      }
      if (root) break;
    }
    if (!root) continue;
    ev["follows"] = {{"code", root->code}, {"step", root->step}, {"location", root->location}};
    crash.evidence_json = ev.dump();
    crash.summary += " (after the " + root->code + " at step " + std::to_string(root->step) + ": the numbers it left)";
    json root_ev = json::parse(root->evidence_json, nullptr, false);
    if (!root_ev.is_object()) root_ev = json::object();
    root_ev["ended_the_run"] = crash.step;
    root->evidence_json = root_ev.dump();
    root->severity = Severity::kCritical;
  }
}

}  // namespace

std::vector<Finding> Doctor::findings() const {
  std::vector<Finding> out = findings_;
  ResolveContradictions(&out);
  for (Finding& f : out) {
    // With the run's final facts: what was advised early may be contradicted since.
    FitActionsToFacts(&f, facts_);
    NoteClipping(&f, facts_.clip_norm);
  }
  const std::set<std::string> judged = CodesJudgedOnTheWholeRun();
  std::set<std::string> found;
  for (const Finding& f : out) found.insert(f.code);
  for (const Finding& r : recorded_) {
    const bool dup = std::any_of(out.begin(), out.end(), [&](const Finding& f) {
      return f.code == r.code && f.location == r.location;
    });
    if (dup) continue;
    out.push_back(r);
    // The online doctor's (it dates every finding: detected_at; the client's checks do not),
    // raised while the run went on (an early warning: a plateau the loss later left), and the
    // whole run, judged again by the same detector, has no finding of that code: the rest of
    // the run did not confirm it. Kept, as information, so the report says it was raised;
    // never a warning the finished run contradicts.
    if (r.severity <= Severity::kInfo || !judged.count(r.code) || found.count(r.code)) continue;
    json ev = json::parse(r.evidence_json, nullptr, false);
    if (!ev.is_object() || !ev.contains("detected_at")) continue;
    Finding& f = out.back();
    f.severity = Severity::kInfo;
    f.summary += " (raised during the run; the whole run does not confirm it)";
    ev["not_confirmed_by_whole_run"] = true;
    f.evidence_json = ev.dump();
  }
  LinkCrashToBlowUp(&out);
  GroupFindings(&out);
  SortFindings(&out);
  return out;
}

std::set<std::string> Doctor::CodesJudgedOnTheWholeRun() const {
  std::set<std::string> codes;
  if (options_.streaming || !finished_) return codes;  // online, the rest of the run is still to come
  const InputView view{facts_, seen_scalars_};
  std::set<Input> missing;
  for (const InputInfo& input : Inputs()) {
    if (input.missing(view)) missing.insert(input.input);
  }
  // A detector judged a code when every input the code needs was there (a need with no
  // codes is every code's).
  for (const auto& d : detectors_) {
    if (d->judges_loss_progress() && !facts_.rl_tag.empty()) continue;  // not run on an RL run
    const DetectorSpec spec = d->spec();
    for (const std::string& code : spec.codes) {
      const bool has_all = std::none_of(spec.needs.begin(), spec.needs.end(), [&](const Need& need) {
        const bool for_code = need.codes.empty() ||
                              std::find(need.codes.begin(), need.codes.end(), code) != need.codes.end();
        return for_code && missing.count(need.input);
      });
      if (has_all) codes.insert(code);
    }
  }
  return codes;
}

std::vector<NotChecked> Doctor::not_checked() const {
  // Per input the run lacks: the codes of every registered detector that need it, in
  // registry order (those marked listed_last after the others).
  const InputView view{facts_, seen_scalars_};
  std::vector<NotChecked> out;
  for (const InputInfo& input : Inputs()) {
    if (!input.missing(view)) continue;
    std::vector<std::string> codes;
    for (bool last : {false, true}) {
      for (const DetectorSpec& spec : specs_) {
        for (const Need& need : spec.needs) {
          if (need.input != input.input || need.listed_last != last) continue;
          for (const std::string& code : need.codes.empty() ? spec.codes : need.codes) {
            if (std::find(codes.begin(), codes.end(), code) == codes.end()) codes.push_back(code);
          }
        }
      }
    }
    if (codes.empty()) continue;  // no detector needs it
    out.push_back({input.check, std::move(codes), input.reason(view)});
  }
  return out;
}

// ---- offline ----

Diagnosis Diagnose(const StepwiseRun& run, const DoctorOptions& options) {
  DoctorOptions opts = options;
  opts.streaming = false;
  Doctor doctor(std::move(opts));
  doctor.PrepareOffline(run.scalars, run.points_of);
  for (const auto& [key, value] : run.meta) doctor.OnMeta(key, value);
  run.replay_steps(&doctor, [&doctor](int64_t step) { doctor.JudgeThrough(step); });
  for (const Finding& f : run.findings) doctor.OnFinding(f);
  doctor.Finish();
  Diagnosis d;
  d.findings = doctor.findings();
  d.not_checked = doctor.not_checked();
  d.steps = doctor.steps_judged();
  return d;
}

Diagnosis Diagnose(const RunData& run, const DoctorOptions& options) {
  StepwiseRun stepwise{run.meta, run.findings, {}, {}, {}};
  for (const ScalarSeries& s : run.scalars) {
    if (!s.steps.empty()) stepwise.scalars.push_back({s.tag, *std::min_element(s.steps.begin(), s.steps.end())});
  }
  stepwise.points_of = [&run](const std::string& tag, std::vector<int64_t>* steps, std::vector<double>* values) {
    if (const ScalarSeries* s = run.FindScalar(tag)) *steps = s->steps, *values = s->values;
  };
  stepwise.replay_steps = [&run](SampleSink* sink, const std::function<void(int64_t)>& step_done) {
    run.ReplaySteps(sink, step_done);
  };
  return Diagnose(stepwise, options);
}

json DiagnosisToJson(const Diagnosis& d, const std::string& source, const std::string& format, int64_t steps) {
  json findings = json::array();
  for (const Finding& f : d.findings) findings.push_back(FindingToJson(f));
  json not_checked = json::array();
  for (const NotChecked& n : d.not_checked) {
    not_checked.push_back({{"check", n.check}, {"codes", n.codes}, {"reason", n.reason}});
  }
  return {{"source", source}, {"format", format}, {"steps", steps}, {"findings", findings},
          {"not_checked", not_checked}};
}

}  // namespace trainscope::doctor
