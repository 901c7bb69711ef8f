// Which tag plays which role. Recorded runs use DESIGN.md's tags (train/loss, val/loss,
// opt/lr, grad/global_norm); imported logs use whatever names their tool used. A role map
// in the run meta key `roles` ({"loss": "train/loss", "val_loss": "eval/loss", ...}) names
// them explicitly; otherwise each scalar tag is scored against each role by its name
// (loss, train_loss, "lm loss", eval_loss, learning_rate, grad_norm, ...) and the
// best-scoring tag wins.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace trainscope::doctor {

// An ASCII lower-cased copy: tags, module types and meta values are matched case-blind.
std::string Lower(std::string_view s);

// kLossScale .. kNanSteps are the mixed-precision evidence: the loss scale, one point per
// step skipped on overflow (amp/overflow_skip), a counter of skipped steps (DeepSpeed's
// cumulative `skipped`, Megatron's per-interval "number of skipped iterations") and
// Megatron's per-interval "number of nan iterations".
enum class Role {
  kLoss = 0, kValLoss, kAcc, kValAcc, kLr, kGradNorm, kMacroF1,
  kLossScale, kOverflowSkip, kSkippedSteps, kNanSteps, kCount
};
inline constexpr size_t kRoleCount = static_cast<size_t>(Role::kCount);

// The role's key in the `roles` meta object: loss, val_loss, acc, val_acc, lr, grad_norm,
// macro_f1, loss_scale, overflow_skip, skipped_steps, nan_steps (the importers' keys,
// data/roles.json; their "accuracy"/"val_accuracy" are read as acc/val_acc).
const char* RoleKey(Role role);

// How well a scalar tag's name fits a role: 0 = not at all, 100 = DESIGN.md's own tag.
int RoleScore(std::string_view tag, Role role);

class RoleResolver {
 public:
  // Parses the `roles` meta value (a JSON object of role key -> tag). Explicit roles are
  // never replaced by name matching. Returns false when the text is not such an object.
  bool SetExplicit(std::string_view roles_json);
  // Offers a scalar tag; it takes every role it scores best for so far.
  void See(std::string_view tag);
  // The tag playing `role`, or "" when none does.
  const std::string& Get(Role role) const { return tags_[static_cast<size_t>(role)]; }
  bool Has(Role role) const { return !Get(role).empty(); }

 private:
  std::array<std::string, kRoleCount> tags_;
  std::array<int, kRoleCount> scores_{};
  std::array<bool, kRoleCount> explicit_{};
};

}  // namespace trainscope::doctor
