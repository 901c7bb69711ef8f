// Which tag plays which role: the one resolver, for the importers (ResolveRoles, whose map
// they store as meta "roles") and the doctor (RoleResolver, tag by tag). Recorded runs use
// DESIGN.md's tags (train/loss, val/loss, opt/lr, grad/global_norm); imported logs use
// whatever names their tool used. A role map in the run meta key `roles` ({"loss":
// "train/loss", "val_loss": "eval/loss", ...}) names them explicitly; otherwise each tag
// is scored against each role and the best-scoring tag wins (ties: the first one seen).
//
// The scores are data first: data/roles.json (compiled in) lists per role the candidate
// tags in order of preference, per format too, and the old spellings of role keys
// ("accuracy" -> "acc"); a tag not on any list is scored by its name's words (loss,
// train_loss, eval_loss, learning_rate, grad_norm, ...), shorter names first.
#pragma once

#include <array>
#include <map>
#include <string>
#include <string_view>
#include <vector>

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
// macro_f1, loss_scale, overflow_skip, skipped_steps, nan_steps (data/roles.json's keys;
// the table also has roles only the importers record, step_time and epoch).
const char* RoleKey(Role role);

// Every role key in data/roles.json, in its order.
const std::vector<std::string>& RoleKeys();
// The key a role spelling means: data/roles.json's aliases ("accuracy" -> "acc",
// "val_accuracy" -> "val_acc"); any other text is itself.
std::string CanonicalRoleKey(std::string_view key);

// How well a tag fits a role: 0 = not at all. A candidate in data/roles.json scores above
// every name pattern (those score at most 100): one for `format` ("csv/yolo"; a prefix
// "csv" also matches "csv/yolo") above 250, a common one above 150, earlier ones higher.
int RoleScore(std::string_view tag, std::string_view role_key, std::string_view format = {});
int RoleScore(std::string_view tag, Role role);

using RoleMap = std::map<std::string, std::string>;

// Resolves every role of data/roles.json for a run of `format` ("tfevents", "csv/yolo",
// ...) whose series are `tags` (in the run's order): the best-scoring tag per role, as
// RoleResolver would pick it. `overrides` (role -> tag; aliases accepted) win, even for a
// tag the run does not have (the user knows best; the doctor will find no data and say so).
RoleMap ResolveRoles(std::string_view format, const std::vector<std::string>& tags, const RoleMap& overrides = {});

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
