#include "doctor/detectors/target_leak.h"

#include <algorithm>
#include <cmath>

#include "core/tag.h"

namespace trainscope::doctor {

namespace {
using json = nlohmann::json;
}  // namespace

void TargetLeakDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  if (std::isfinite(facts.loss) && facts.loss < 0) negative_seen_ = true;
  if (done_) return;
  if (const double* copy = frame.Scalar(tags::kDataTargetCopyFraction)) {
    if (std::isfinite(*copy)) {
      copy_sum_ += *copy;
      ++copy_points_;
      if (copy_first_step_ < 0) copy_first_step_ = frame.step;
      if (const double* next = frame.Scalar(tags::kDataTargetNextFraction)) next_sum_ += std::isfinite(*next) ? *next : 0;
    }
  }
  const std::string& val_tag = facts.roles.Get(Role::kValLoss);
  if (const double* val = val_tag.empty() ? nullptr : frame.Scalar(val_tag)) val_loss_ = *val;
  const double loss = facts.loss;
  if (std::isnan(loss)) return;
  if (!std::isfinite(loss)) {
    done_ = true;  // the non-finite forensics own this run's loss
    return;
  }
  if (std::isnan(first_loss_)) {
    first_loss_ = loss;
    first_step_ = frame.step;
    if (!(loss >= options_.min_first_loss)) done_ = true;  // not a loss that starts at ln(classes)
    return;
  }
  ++points_;
  last_loss_step_ = frame.step;
  recent_.push_back(loss);
  if (recent_.size() > options_.median_points) recent_.erase(recent_.begin());
  if (points_ > options_.fast_points) {
    done_ = true;  // reached late, or never: not "too fast"
    return;
  }
  Judge(frame.step, ctx, false);
}

void TargetLeakDetector::Finish(const DetectorContext& ctx) {
  if (!done_ && points_ > 0) Judge(last_loss_step_, ctx, true);
  const bool negative = negative_seen_ || ctx.facts.loss_end_level < 0;
  if (deferred_ && !negative) ctx.Report(std::move(*deferred_));
  deferred_.reset();
}

void TargetLeakDetector::Judge(int64_t step, const DetectorContext& ctx, bool at_end) {
  if (recent_.size() < options_.median_points) return;
  const double level = Median(recent_);
  const bool copies = copy_points_ > 0 && copy_sum_ / copy_points_ >= options_.copy_fraction &&
                      next_sum_ / copy_points_ < copy_sum_ / copy_points_;
  const double bar = copies ? options_.collapse_with_data * first_loss_
                            : std::min(options_.collapse_alone * first_loss_, options_.absolute_alone);
  if (!(level <= bar)) return;
  const RunFacts& facts = ctx.facts;
  const bool classifier = facts.has_labels || facts.num_classes > 1 || facts.roles.Has(Role::kAcc) ||
                          facts.roles.Has(Role::kValAcc);
  if (!copies && !classifier) return;
  // Memorising the training set leaves the validation loss high: that is overfitting.
  // Online the validation loss may not have been logged yet when the training loss
  // collapses: without the data's evidence wait for it (or the run's end).
  const bool has_val = !std::isnan(val_loss_);
  if (has_val && !(val_loss_ <= std::max(options_.val_ratio * level, options_.absolute_alone))) return;
  if (!copies && !has_val && !at_end && ctx.facts.roles.Has(Role::kValLoss)) return;
  done_ = true;
  if (negative_seen_ || ctx.facts.loss_end_level < 0) return;
  Finding f;
  f.code = "TARGET_LEAK";
  // The loss alone cannot tell a leak from a task that is simply easy (a template-matching
  // CNN of the scenarios reaches 0.3 % of its start honestly): info. With the data's
  // evidence that the targets are the inputs: a warning.
  f.severity = copies ? Severity::kWarning : Severity::kInfo;
  f.step = copies ? copy_first_step_ : first_step_;
  f.last_step = step;
  f.location = ctx.facts.roles.Get(Role::kLoss);
  json evidence = {{"first_loss", Num(first_loss_)}, {"first_loss_step", first_step_},
                   {"loss", Num(level)},            {"loss_step", step},
                   {"ratio", Num(level / first_loss_)}, {"points", points_},
                   {"bar", Num(bar)}};
  if (has_val) evidence["val_loss"] = Num(val_loss_);
  std::vector<Cause> causes;
  std::string summary = "the loss fell from " + FormatNumber(first_loss_, 4) + " to " + FormatNumber(level, 3) + " (" +
                        FormatNumber(100 * level / first_loss_, 2) + " % of its start) within " +
                        std::to_string(points_) + " points";
  if (has_val) summary += ", the validation loss with it (" + FormatNumber(val_loss_, 3) + ")";
  if (copy_points_ > 0) {
    evidence["target_copy_fraction"] = Num(copy_sum_ / copy_points_);
    evidence["target_next_fraction"] = Num(next_sum_ / copy_points_);
    evidence["batches_compared"] = copy_points_;
  }
  if (copies) {
    causes = {{"target_is_input", 0.9}, {"label_in_features", 0.2}};
    summary += "; the targets equal the inputs at " + FormatNumber(100 * copy_sum_ / copy_points_, 3) +
               " % of positions: the model is taught to copy its input (a next-token target needs the inputs "
               "shifted by one)";
  } else {
    causes = {{"target_is_input", 0.5}, {"label_in_features", 0.5}, {"data_leakage", 0.3}};
    summary += ": far below what a real task allows, this fast. The answer is in the input: targets equal to "
               "(or derived from) the inputs, or the label among the features";
  }
  f.summary = summary;
  f.evidence_json = evidence.dump();
  f.causes = std::move(causes);
  if (copies) {
    ctx.Report(std::move(f));
  } else {
    json ev = json::parse(f.evidence_json);
    ev["detected_at"] = step;  // the data showed it here; reported at the end
    f.evidence_json = ev.dump();
    deferred_ = std::move(f);
  }
}

}  // namespace trainscope::doctor
