#include "doctor/roles.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <vector>

namespace trainscope::doctor {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

namespace {

// Splits a lower-cased tag into word tokens at / _ - . space and digit boundaries.
std::vector<std::string> Tokens(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      cur.push_back(c);
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

bool Any(const std::vector<std::string>& tokens, std::initializer_list<const char*> words) {
  for (const auto& t : tokens) {
    for (const char* w : words) {
      if (t == w) return true;
    }
  }
  return false;
}

bool IsValToken(const std::vector<std::string>& t) {
  return Any(t, {"val", "eval", "valid", "validation", "test", "dev", "evaluation", "holdout"});
}

// Name-matching score: exact names first, then token rules; shorter tags win ties (the
// plain "loss" rather than "loss_scale_factor").
int TokenScore(int base, const std::string& tag) {
  return std::max(1, base - static_cast<int>(std::min<size_t>(tag.size(), 40)) / 4);
}

}  // namespace

const char* RoleKey(Role role) {
  switch (role) {
    case Role::kLoss: return "loss";
    case Role::kValLoss: return "val_loss";
    case Role::kAcc: return "acc";
    case Role::kValAcc: return "val_acc";
    case Role::kLr: return "lr";
    case Role::kGradNorm: return "grad_norm";
    case Role::kMacroF1: return "macro_f1";
    case Role::kLossScale: return "loss_scale";
    case Role::kOverflowSkip: return "overflow_skip";
    case Role::kSkippedSteps: return "skipped_steps";
    case Role::kNanSteps: return "nan_steps";
    case Role::kCount: break;
  }
  return "";
}

int RoleScore(std::string_view raw, Role role) {
  const std::string tag = Lower(raw);
  const std::vector<std::string> t = Tokens(tag);
  const bool val = IsValToken(t);
  const bool loss = Any(t, {"loss", "nll", "xent", "cross_entropy"}) ||
                    tag.find("loss") != std::string::npos;
  // Things that contain "loss" but are not the objective's value.
  const bool not_a_loss = Any(t, {"scale", "scaler", "weight", "step", "time", "count", "lr"});
  const bool iterations = Any(t, {"iterations", "iteration", "iters", "iter", "steps", "step"});
  switch (role) {
    case Role::kLoss:
      if (tag == "train/loss") return 100;
      if (tag == "loss" || tag == "train_loss" || tag == "loss/train" || tag == "training_loss" ||
          tag == "train/loss_step" || tag == "lm loss" || tag == "train/lm_loss") return 90;
      if (loss && !val && !not_a_loss) return TokenScore(60, tag);
      return 0;
    case Role::kValLoss:
      if (tag == "val/loss") return 100;
      if (tag == "eval/loss" || tag == "eval_loss" || tag == "val_loss" || tag == "loss/val" ||
          tag == "validation_loss" || tag == "valid/loss" || tag == "loss/validation") return 90;
      if (loss && val && !not_a_loss) return TokenScore(60, tag);
      return 0;
    case Role::kAcc:
    case Role::kValAcc: {
      const bool acc = Any(t, {"acc", "accuracy", "top1"});
      if (!acc || val != (role == Role::kValAcc)) return 0;
      if (tag == (role == Role::kAcc ? "train/acc" : "val/acc")) return 100;
      return TokenScore(60, tag);
    }
    case Role::kLr:
      if (tag == "opt/lr") return 100;
      if (tag.rfind("opt/lr/", 0) == 0) return 80;
      if (tag == "lr" || tag == "learning_rate" || tag == "train/learning_rate" || tag == "train/lr") return 90;
      if (Any(t, {"lr", "learning_rate"}) || tag.find("learning_rate") != std::string::npos ||
          (Any(t, {"learning"}) && Any(t, {"rate"})))
        return TokenScore(60, tag);
      return 0;
    case Role::kGradNorm:
      if (tag == "grad/global_norm") return 100;
      if (tag == "grad_norm" || tag == "train/grad_norm" || tag == "gradient_norm") return 90;
      if (tag.find("grad_norm") != std::string::npos || tag.find("gradnorm") != std::string::npos ||
          (Any(t, {"grad", "gradient", "grads"}) && Any(t, {"norm"})))
        return TokenScore(60, tag);
      return 0;
    case Role::kMacroF1: {
      if (!Any(t, {"f1", "macro_f1", "f1_macro"}) && tag.find("f1") == std::string::npos) return 0;
      const int base = Any(t, {"macro"}) || tag.find("macro") != std::string::npos ? 80 : 50;
      return TokenScore(base + (val ? 5 : 0), tag);
    }
    case Role::kLossScale:
      if (tag == "amp/loss_scale") return 100;
      if (tag == "loss scale" || tag == "loss_scale" || tag == "train/loss_scale" || tag == "grad_scaler/scale") return 90;
      if (loss && Any(t, {"scale", "scaler"})) return TokenScore(60, tag);
      return 0;
    case Role::kOverflowSkip:
      if (tag == "amp/overflow_skip") return 100;
      if (Any(t, {"overflow"}) && Any(t, {"skip", "skipped"})) return TokenScore(60, tag);
      return 0;
    case Role::kSkippedSteps:
      // DeepSpeed prints a cumulative `skipped=K`; Megatron "number of skipped iterations".
      if (tag == "skipped" || tag == "number of skipped iterations" || tag == "skipped_steps") return 90;
      if (Any(t, {"skipped"}) && iterations) return TokenScore(60, tag);
      return 0;
    case Role::kNanSteps:
      if (tag == "number of nan iterations") return 90;
      if (Any(t, {"nan"}) && iterations) return TokenScore(60, tag);
      return 0;
    case Role::kCount:
      break;
  }
  return 0;
}

bool RoleResolver::SetExplicit(std::string_view roles_json) {
  nlohmann::json j = nlohmann::json::parse(roles_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  // The importers (data/roles.json) say accuracy/val_accuracy where the doctor says acc.
  for (const auto& [alias, key] : {std::pair{"accuracy", "acc"}, std::pair{"val_accuracy", "val_acc"}}) {
    if (j.contains(alias) && !j.contains(key)) j[key] = j[alias];
  }
  for (size_t r = 0; r < kRoleCount; ++r) {
    auto it = j.find(RoleKey(static_cast<Role>(r)));
    if (it != j.end() && it->is_string() && !it->get<std::string>().empty()) {
      tags_[r] = it->get<std::string>();
      explicit_[r] = true;
    }
  }
  return true;
}

void RoleResolver::See(std::string_view tag) {
  for (size_t r = 0; r < kRoleCount; ++r) {
    if (explicit_[r]) continue;
    const int score = RoleScore(tag, static_cast<Role>(r));
    if (score > scores_[r]) {
      scores_[r] = score;
      tags_[r] = std::string(tag);
    }
  }
}

}  // namespace trainscope::doctor
