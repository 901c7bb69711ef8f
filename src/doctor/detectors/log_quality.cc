// The log itself: points of one series that share a step. Writers do it for a reason (YOLO
// logs a running mean every batch with the epoch as its step; a resumed run writes steps
// 90..99 again), and the doctor judges one value per series and step: the last one logged.
// It says so (DUPLICATE_STEPS, info) rather than judging silently what it dropped.
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tag.h"
#include "doctor/detector.h"

namespace trainscope::doctor {

namespace {

class DuplicateStepsDetector : public Detector {
 public:
  const char* name() const override { return "duplicate_steps"; }
  DetectorSpec spec() const override {
    return {{"DUPLICATE_STEPS"}, {}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  struct PerTag {
    uint64_t extra_points = 0;  // points beyond the first at their step
    uint64_t steps = 0;         // steps with more than one point
    uint64_t most = 0;          // most points at one step
    int64_t most_step = 0;
    int64_t first_step = 0;
  };
  // A scalar series: whether it is the user's (not sampled by the clock, not trainscope's
  // own), and its points in the frame being judged (frame_index_).
  struct Series {
    bool user = false;
    uint64_t frame = 0;
    uint64_t n = 0;
    double first = 0;
    bool differs = false;
  };
  std::map<std::string, PerTag> tags_;
  uint64_t extra_points_ = 0;
  uint64_t frame_index_ = 0;
  TagMap<Series> series_;
  std::vector<const TagMap<Series>::value_type*> repeated_;  // of this frame, with two points or more
};

// How the run ended, from what the log says: meta "exception" (a recorded run that
// crashed, or the traceback at the end of an imported console log) and meta
// "wandb_exit_code". RUN_CRASHED: critical for an exception (out of memory named as such),
// info for KeyboardInterrupt (stopped by its user); a non-zero exit code without an
// exception is a warning. The finding sits at the last step judged.
class RunExitDetector : public Detector {
 public:
  const char* name() const override { return "run_exit"; }
  DetectorSpec spec() const override {
    return {{"RUN_CRASHED"}, {}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override { last_step_ = frame.step; }
  void Finish(const DetectorContext& ctx) override;

 private:
  int64_t last_step_ = 0;
};

// An exception about a number that overflowed or is not finite: OverflowError ("math range
// error": math.exp of a diverged loss for a perplexity), FloatingPointError, "probability
// tensor contains either `inf`, `nan` or element < 0" (sampling from NaN weights).
bool IsNumericException(const std::string& lower) {
  if (lower.find("math range error") != std::string::npos) return true;
  // Whole words: "finite" of "non-finite", never of "indefinitely".
  static const std::set<std::string> kWords = {"nan",      "inf",          "infinity",          "infinite", "finite",
                                               "nonfinite", "overflow", "overflowerror", "floatingpointerror"};
  std::string word;
  for (size_t i = 0; i <= lower.size(); ++i) {
    const char c = i < lower.size() ? lower[i] : ' ';
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += c;
    } else if (!word.empty()) {
      if (kWords.count(word)) return true;
      word.clear();
    }
  }
  return false;
}

}  // namespace

void DuplicateStepsDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  if (frame.scalars.size() < 2) return;
  ++frame_index_;
  // Repeats of the same value (an HF trainer_state's train and eval entries both carry
  // `epoch`) lose nothing: only points that disagree with another at their step count.
  repeated_.clear();
  for (const auto& [tag, value] : frame.scalars) {
    auto it = series_.find(tag);
    if (it == series_.end()) {
      // System metrics are sampled by the clock (every few seconds), not once per step: a
      // step longer than the interval, or the last sample at finish(), has several. Series
      // trainscope writes itself (time/, mem/, grad/, opt/ ...): how it steps them is not
      // the user's to fix.
      it = series_.emplace(std::string(tag), Series{}).first;
      it->second.user = !tags::IsTrainscopeSeries(tag);
    }
    Series& s = it->second;
    if (!s.user) continue;
    if (s.frame != frame_index_) {
      s.frame = frame_index_;
      s.n = 1;
      s.first = value;
      s.differs = false;
      continue;
    }
    if (++s.n == 2) repeated_.push_back(&*it);
    if (!(value == s.first || (std::isnan(value) && std::isnan(s.first)))) s.differs = true;
  }
  for (const auto* entry : repeated_) {
    const Series& s = entry->second;
    if (!s.differs) continue;
    PerTag& t = tags_[entry->first];
    if (t.steps == 0) t.first_step = frame.step;
    t.extra_points += s.n - 1;
    ++t.steps;
    if (s.n > t.most) {
      t.most = s.n;
      t.most_step = frame.step;
    }
    extra_points_ += s.n - 1;
  }
}

void DuplicateStepsDetector::Finish(const DetectorContext& ctx) {
  if (extra_points_ == 0) return;
  // The series that repeats most: the loss when it is among them.
  const std::string& loss = ctx.facts.roles.Get(Role::kLoss);
  const std::string* worst = nullptr;
  for (const auto& [tag, t] : tags_) {
    if (!worst || t.extra_points > tags_.at(*worst).extra_points) worst = &tag;
  }
  if (tags_.count(loss)) worst = &loss;
  const PerTag& w = tags_.at(*worst);
  Finding f;
  f.code = "DUPLICATE_STEPS";
  f.severity = Severity::kInfo;
  f.step = w.first_step;
  f.last_step = w.most_step;
  f.location = *worst;
  f.summary = std::to_string(extra_points_) + " points share their step with an earlier point of the same series (" +
              std::to_string(tags_.size()) + " series; '" + *worst + "' has " + std::to_string(w.most) +
              " points at step " + std::to_string(w.most_step) +
              "): the doctor judged the last value logged at each step";
  nlohmann::json series = nlohmann::json::object();
  for (const auto& [tag, t] : tags_) {
    if (series.size() >= 20) break;
    series[tag] = {{"extra_points", t.extra_points}, {"steps_repeated", t.steps}, {"most_at_one_step", t.most},
                   {"step", t.most_step}};
  }
  f.evidence_json = nlohmann::json{{"extra_points", extra_points_}, {"series_count", tags_.size()}, {"series", series}}.dump();
  ctx.Report(std::move(f));
}

void RunExitDetector::Finish(const DetectorContext& ctx) {
  const auto& meta = ctx.facts.meta;
  auto exception = meta.find("exception");
  auto exit_code = meta.find("wandb_exit_code");
  std::string text = exception != meta.end() ? exception->second : "";
  // Recorded runs store {"type": ..., "message": ...}; imported logs the traceback's last line.
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_object()) {
    const std::string type = j.value("type", ""), message = j.value("message", "");
    text = message.empty() ? type : type + ": " + message;
  }
  const int code = exit_code != meta.end() ? std::atoi(exit_code->second.c_str()) : 0;
  if (text.empty() && code == 0) return;
  Finding f;
  f.code = "RUN_CRASHED";
  f.step = f.last_step = last_step_;
  const std::string lower = Lower(text);
  if (lower.rfind("keyboardinterrupt", 0) == 0) {
    f.severity = Severity::kInfo;
    f.summary = "the run was stopped by its user (KeyboardInterrupt) after step " + std::to_string(last_step_);
    f.causes = {{"stopped_by_user", 0.9}};
  } else if (!text.empty()) {
    f.severity = Severity::kCritical;
    const bool oom = lower.find("out of memory") != std::string::npos || lower.find("outofmemory") != std::string::npos;
    f.location = text.substr(0, text.find(':'));
    f.summary = "the run crashed after step " + std::to_string(last_step_) + ": " + text.substr(0, 300);
    if (oom) f.causes = {{"out_of_memory", 0.9}};
    else if (IsNumericException(lower)) f.causes = {{"numbers_blew_up", 0.8}, {"exception", 0.3}};
    else f.causes = {{"exception", 0.8}};
  } else {
    f.severity = Severity::kWarning;
    f.summary = "the process exited with code " + std::to_string(code) + " after step " + std::to_string(last_step_);
    f.causes = {{"exception", 0.5}};
  }
  nlohmann::json ev = nlohmann::json::object();
  if (!text.empty()) ev["exception"] = text.substr(0, 500);
  if (!text.empty() && IsNumericException(lower)) ev["numeric"] = true;
  if (exit_code != meta.end()) ev["exit_code"] = code;
  ev["last_step"] = last_step_;
  f.evidence_json = ev.dump();
  ctx.Report(std::move(f));
}

std::unique_ptr<Detector> MakeDuplicateStepsDetector() { return std::make_unique<DuplicateStepsDetector>(); }
std::unique_ptr<Detector> MakeRunExitDetector() { return std::make_unique<RunExitDetector>(); }

}  // namespace trainscope::doctor
