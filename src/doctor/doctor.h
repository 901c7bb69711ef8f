// The doctor: turns a run's sample stream into findings (DESIGN.md). The same code runs
// online, fed sample by sample while training goes on, and offline over a recorded or
// imported run:
//
//   Doctor doctor(options);            // online: a SampleSink, fed samples as they
//   doctor.OnScalar(...); ...          //   arrive (OnlineDoctor, online_doctor.h, feeds
//   doctor.EndBatch();                 //   it each recorder commit on its own thread)
//   doctor.Finish();                   // at run.finish()
//   doctor.findings();
//
//   Diagnosis d = Diagnose(run_data);  // offline
//
// The doctor groups samples into steps (StepFrame) and gives each detector every step in
// order. Online it holds the newest `lag_steps` + 1 steps open, so samples of one step that
// arrive interleaved with the next are still seen together; a sample for a step already
// judged is counted in late_samples() and ignored. Not thread-safe: feed it from one
// thread (the OnlineDoctor's, or the caller's).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/run_data.h"
#include "doctor/detector.h"

namespace trainscope::doctor {

// The doctor's own options. A detector's thresholds are its own: an Options struct with
// its defaults and the reasons for them, beside its class (docs/doctor.md); the registry
// builds every detector with them.
struct DoctorOptions {
  // Steps of every statistic kept for the evidence of a finding.
  size_t flight_recorder_steps = 32;
  // true: judge steps as they complete (online). false: keep everything until Finish()
  // and judge it then in step order (offline: samples may come series by series).
  bool streaming = true;
  int64_t lag_steps = 1;
  // A sample that arrives for a step already judged (activation statistics measured on a
  // helper thread are committed a few steps after their forward) widens the window to what
  // it would have needed, up to max_lag_steps: the streaming doctor then sees what an
  // offline diagnosis of the same run sees, and the two verdicts agree.
  int64_t max_lag_steps = 64;
  // Streaming behind a feeder that hands over samples in batches grouped by kind (the
  // recorder: all of a batch's scalars, then its tensor statistics, vectors, spans): judge
  // only at EndBatch(). Judging as samples arrive would close a step when the scalars of
  // later steps come in, before its own activations and gradients of the same batch do.
  bool judge_at_batch_end = false;
  // Run only the detectors with these names (empty: all). Tests use it to look at one.
  std::set<std::string> only;
  // Called when a finding opens (not when it is extended): the live alert.
  std::function<void(const Finding&)> on_finding;
};

// The registry (registry.cc): every detector, once, in the order they judge a step, each
// with its own thresholds (`options` sets none of them).
std::vector<std::unique_ptr<Detector>> MakeDetectors(const DoctorOptions& options);

// A check the doctor could not run on this run, and why (e.g. a loss-only imported log).
struct NotChecked {
  std::string check;
  std::vector<std::string> codes;
  std::string reason;
};

class Doctor : public SampleSink {
 public:
  explicit Doctor(DoctorOptions options = {});
  ~Doctor() override;

  void OnScalar(std::string_view tag, int64_t step, double wall_time, double value) override;
  void OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) override;
  void OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) override;
  void OnSpan(const Span& span) override;
  // A finding recorded earlier (e.g. by the online doctor): merged into findings().
  void OnFinding(const Finding& finding) override;
  void OnMeta(std::string_view key, std::string_view value) override;

  // The feeder has handed over a whole batch (judge_at_batch_end): judge the steps older
  // than the newest one by more than lag_steps.
  void EndBatch();

  // Judges every step still open and runs the end-of-run checks. Idempotent; samples that
  // arrive afterwards are ignored.
  void Finish();

  // Offline, fed in step order (Diagnose): takes from the whole run what Finish would
  // otherwise gather from every held step before judging the first (the roles of all its
  // tags, whether it is reinforcement learning, where the loss ends), so that each step can
  // be judged as soon as it is complete (JudgeThrough) and only one is held. `scalars`: the
  // run's scalar series in series order, each with its smallest step; `points_of` reads one
  // series' points (steps and values in series order), asked for the loss only.
  struct ScalarStart {
    std::string_view tag;
    int64_t first_step;
  };
  using SeriesPoints =
      std::function<void(const std::string& tag, std::vector<int64_t>* steps, std::vector<double>* values)>;
  void PrepareOffline(const std::vector<ScalarStart>& scalars, const SeriesPoints& points_of);
  // Judges the open steps up to `step` (offline, after PrepareOffline).
  void JudgeThrough(int64_t step);

  // Findings so far: the doctor's, then recorded ones not already found (same code and
  // location), worst first, then by step. Offline, once finished, a recorded warning of a
  // code the whole run was judged for and did not produce becomes info (not confirmed).
  std::vector<Finding> findings() const;
  // What could not be checked with the data seen, and why.
  std::vector<NotChecked> not_checked() const;
  int64_t steps_judged() const { return facts_.steps_seen; }
  uint64_t late_samples() const { return late_samples_; }
  const RunFacts& facts() const { return facts_; }
  // The names of the detectors that run.
  std::vector<std::string> detector_names() const;

 private:
  // Offline and finished: the codes of the detectors that judged this run with the inputs
  // they need (none online).
  std::set<std::string> CodesJudgedOnTheWholeRun() const;
  StepFrame& FrameFor(int64_t step, double wall_time, bool* accepted);
  // The tag as a view into tag_names_, which StepFrame::scalars point into.
  std::string_view Intern(std::string_view tag);
  void JudgeReadyFrames(bool batch_end = false);
  void Judge(const StepFrame& frame);
  // RunFacts from each judged step (run_facts.cc).
  void UpdateFacts(const StepFrame& frame);
  void NoteTags(const StepFrame& frame);
  void UpdateStepNumbers(const StepFrame& frame);
  void UpdateDifferentialEvidence(const StepFrame& frame);
  void UpdateClipping(double grad_norm);
  // Tags that only reinforcement-learning runs log: returns, episodes, rollouts, exploration,
  // advantages, actor/critic losses.
  static bool IsReinforcementLearningTag(std::string_view tag);
  // A reinforcement-learning run, or several models each with its own optimizer (a GAN):
  // the loss is not one measure of progress, and the loss-progress detectors do not judge it.
  bool LossIsNotProgress() const { return !facts_.rl_tag.empty() || facts_.MultiObjective(); }
  // Whether `finding` is a consequence of an earlier root finding (the weights went
  // non-finite, or the first updates blew the model up): then it is not reported on its
  // own but listed in the root's evidence.consequences (docs/doctor.md).
  bool IsConsequence(const Finding& finding);
  void Report(Finding finding, bool amend = false);
  // Offline, a finding the end of the run decides on (DetectorContext::ReportOrHold).
  void Hold(Finding finding);

  // What the detectors report to (DetectorContext): the doctor's own Report and Hold.
  class DetectorSink final : public FindingSink {
   public:
    explicit DetectorSink(Doctor* doctor) : doctor_(doctor) {}
    void Report(Finding finding) override { doctor_->Report(std::move(finding)); }
    void Amend(Finding finding) override { doctor_->Report(std::move(finding), /*amend=*/true); }
    void Hold(Finding finding) override { doctor_->Hold(std::move(finding)); }
    std::optional<Finding> TakeHeld(const std::string& code, const std::string& location) override;

   private:
    Doctor* doctor_;
  };
  DetectorContext Context() { return DetectorContext(options_.streaming, facts_, flight_, &detector_sink_); }

  DoctorOptions options_;
  RunFacts facts_;
  FlightRecorder flight_;
  std::vector<std::unique_ptr<Detector>> detectors_;
  std::vector<DetectorSpec> specs_;  // of every registered detector, in registry order
  std::unordered_set<std::string, TagHash, std::equal_to<>> tag_names_;  // every scalar tag seen; nodes do not move
  std::unordered_set<const char*> judged_tags_;  // the interned scalar tags judged so far
  std::map<int64_t, StepFrame> open_;
  int64_t judging_step_ = 0;  // the step being judged (or the last one, in Finish)
  int64_t judged_through_ = std::numeric_limits<int64_t>::min();  // last step judged
  bool finished_ = false;
  bool prepared_ = false;  // PrepareOffline was called
  uint64_t late_samples_ = 0;
  int64_t lag_ = 1;  // the open window now: lag_steps, widened by late samples
  std::vector<Finding> findings_;
  std::map<std::pair<std::string, std::string>, size_t> open_findings_;  // (code, location) -> index
  DetectorSink detector_sink_{this};
  std::map<std::pair<std::string, std::string>, Finding> held_;  // (code, location) -> held finding
  std::vector<Finding> recorded_;
  std::set<std::string, std::less<>> seen_scalars_, seen_weights_, seen_grads_, seen_acts_;
  std::vector<std::string> weight_order_, grad_order_;
  std::set<std::string> first_weight_seen_;
  std::map<std::string, double> latest_dead_, latest_saturated_;  // per module, its latest record
  static constexpr int64_t kClipMinPoints = 5;
  double norm_ceiling_ = 0;   // the largest global gradient norm seen
  int64_t ceiling_hits_ = 0;  // steps at that norm (within 1e-4)
  size_t root_ = static_cast<size_t>(-1);  // index in findings_ of the root finding, if any
};

struct Diagnosis {
  std::vector<Finding> findings;  // worst first, then by step
  std::vector<NotChecked> not_checked;
  int64_t steps = 0;              // steps judged
};

// The finding whose first action goes on top of a report (diagnose's "first:" line, the
// HTML report): among the worst severity present (warning or worse), the first finding
// about what the model learns, else the first one about speed; nullptr when none has an
// action. A page-faulting allocator does not hide an LR that is too high.
const Finding* FirstAction(const std::vector<Finding>& findings);

// A run as the offline doctor reads it, step by step, from wherever it is kept: a RunData
// in memory, or a store read one window of steps at a time (cli/run_diagnosis.cc).
struct StepwiseRun {
  const std::map<std::string, std::string>& meta;
  const std::vector<Finding>& findings;          // recorded with the run
  std::vector<Doctor::ScalarStart> scalars;      // Doctor::PrepareOffline
  Doctor::SeriesPoints points_of;                // Doctor::PrepareOffline
  // Gives `sink` every step's samples in step order, then step_done(step), as
  // RunData::ReplaySteps does.
  std::function<void(SampleSink* sink, const std::function<void(int64_t step)>& step_done)> replay_steps;
};

// Runs the doctor over a whole run (offline) and merges the findings recorded with it.
Diagnosis Diagnose(const StepwiseRun& run, const DoctorOptions& options = {});
Diagnosis Diagnose(const RunData& run, const DoctorOptions& options = {});

// Sorts findings worst first, then by step; ties by evidence, never by name: the finding
// whose code explains the other's (knowledge.json "explains"), then the earlier
// detected_at, then the more confident first cause. A root is never listed after a finding
// it explains.
void SortFindings(std::vector<Finding>* findings);
// Findings that differ only by their location (same code, severity, steps, causes, and
// summary, actions and evidence once the location is taken out of them) become one: the
// first keeps its `location`, and its evidence gains "locations" (every place, in order)
// and "count". One Dropout(0.9) config in 13 layers is one finding, not 13.
void GroupFindings(std::vector<Finding>* findings);

// The `diagnose --json` object of DESIGN.md for one run, plus "not_checked":
// {"source", "format", "steps", "findings": [...], "not_checked": [{"check", "codes",
// "reason"}]}. Shared by the CLI and the Python binding (ts.diagnose).
nlohmann::json DiagnosisToJson(const Diagnosis& diagnosis, const std::string& source, const std::string& format,
                               int64_t steps);

}  // namespace trainscope::doctor
