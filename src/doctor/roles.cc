#include "doctor/roles.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/tag.h"

namespace trainscope::doctor {

extern const char kDefaultRolesJson[];  // data/roles.json, embedded by cmake/embed_text.cmake

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

// The name patterns, for a tag on none of data/roles.json's lists (at most 100).
static int PatternScore(std::string_view raw, Role role) {
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
      if (loss && !val && !not_a_loss) return TokenScore(60, tag);
      return 0;
    case Role::kValLoss:
      if (loss && val && !not_a_loss) return TokenScore(60, tag);
      return 0;
    case Role::kAcc:
    case Role::kValAcc: {
      const bool acc = Any(t, {"acc", "accuracy", "top1"});
      if (!acc || val != (role == Role::kValAcc)) return 0;
      return TokenScore(60, tag);
    }
    case Role::kLr:
      if (tag.rfind(std::string(tags::kOptLr) + "/", 0) == 0) return 80;
      if (Any(t, {"lr", "learning_rate"}) || tag.find("learning_rate") != std::string::npos ||
          (Any(t, {"learning"}) && Any(t, {"rate"})))
        return TokenScore(60, tag);
      return 0;
    case Role::kGradNorm:
      // A squared norm ("grad_norm_square") is not the norm: its jumps are the norm's squared.
      if (tag.find("square") != std::string::npos || Any(t, {"sq", "squared", "norm2", "sqnorm"})) return 0;
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
      if (loss && Any(t, {"scale", "scaler"})) return TokenScore(60, tag);
      return 0;
    case Role::kOverflowSkip:
      if (Any(t, {"overflow"}) && Any(t, {"skip", "skipped"})) return TokenScore(60, tag);
      return 0;
    case Role::kSkippedSteps:
      if (Any(t, {"skipped"}) && iterations) return TokenScore(60, tag);
      return 0;
    case Role::kNanSteps:
      if (Any(t, {"nan"}) && iterations) return TokenScore(60, tag);
      return 0;
    case Role::kCount:
      break;
  }
  return 0;
}

namespace {

// data/roles.json, parsed once, candidates lower-cased (matching is case-blind).
struct RoleTable {
  std::vector<std::string> keys;
  std::map<std::string, std::vector<std::string>> common;                           // key -> candidates
  std::vector<std::pair<std::string, std::map<std::string, std::vector<std::string>>>> formats;  // in file order
  std::map<std::string, std::string> aliases;
};

std::vector<std::string> LowerList(const nlohmann::json& list) {
  std::vector<std::string> out;
  for (const auto& c : list) out.push_back(Lower(c.get<std::string>()));
  return out;
}

const RoleTable& Table() {
  static const RoleTable table = [] {
    const nlohmann::json d = nlohmann::json::parse(kDefaultRolesJson);
    RoleTable t;
    for (auto it = d["roles"].begin(); it != d["roles"].end(); ++it) {
      t.keys.push_back(it.key());
      t.common[it.key()] = LowerList(*it);
    }
    for (auto f = d["formats"].begin(); f != d["formats"].end(); ++f) {
      std::map<std::string, std::vector<std::string>> per_role;
      for (auto r = f->begin(); r != f->end(); ++r) per_role[r.key()] = LowerList(*r);
      t.formats.emplace_back(f.key(), std::move(per_role));
    }
    for (auto a = d["aliases"].begin(); a != d["aliases"].end(); ++a) t.aliases[a.key()] = a->get<std::string>();
    return t;
  }();
  return table;
}

// 0-based place of `tag` in `list`, or -1.
int Place(const std::vector<std::string>& list, const std::string& tag) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] == tag) return static_cast<int>(i);
  }
  return -1;
}

int RoleOfKey(std::string_view key) {
  for (size_t r = 0; r < kRoleCount; ++r) {
    if (key == RoleKey(static_cast<Role>(r))) return static_cast<int>(r);
  }
  return -1;
}

}  // namespace

const std::vector<std::string>& RoleKeys() { return Table().keys; }

std::string CanonicalRoleKey(std::string_view key) {
  const auto& aliases = Table().aliases;
  auto it = aliases.find(std::string(key));
  return it != aliases.end() ? it->second : std::string(key);
}

int RoleScore(std::string_view raw, std::string_view role_key, std::string_view format) {
  const RoleTable& table = Table();
  const std::string key = CanonicalRoleKey(role_key);
  const std::string tag = Lower(raw);
  if (!format.empty()) {
    // The format's own candidates, every matching format's in file order ("csv" matches "csv/yolo").
    int offset = 0;
    const std::string prefix = std::string(format) + "/";
    for (const auto& [name, per_role] : table.formats) {
      if (name != format && name.rfind(prefix, 0) != 0) continue;
      auto it = per_role.find(key);
      if (it == per_role.end()) continue;
      const int place = Place(it->second, tag);
      if (place >= 0) return 300 - std::min(offset + place, 49);
      offset += static_cast<int>(it->second.size());
    }
  }
  if (auto it = table.common.find(key); it != table.common.end()) {
    const int place = Place(it->second, tag);
    if (place >= 0) return 200 - std::min(place, 49);
  }
  const int role = RoleOfKey(key);
  return role < 0 ? 0 : PatternScore(raw, static_cast<Role>(role));
}

int RoleScore(std::string_view tag, Role role) { return RoleScore(tag, RoleKey(role)); }

RoleMap ResolveRoles(std::string_view format, const std::vector<std::string>& tags, const RoleMap& overrides) {
  RoleMap roles;
  for (const std::string& key : RoleKeys()) {
    int best = 0;
    for (const std::string& tag : tags) {
      const int score = RoleScore(tag, key, format);
      if (score > best) {
        best = score;
        roles[key] = tag;
      }
    }
  }
  // A run whose only loss-like series is a validation loss should not call it "the loss".
  if (roles.count("loss") && roles.count("val_loss") && roles["loss"] == roles["val_loss"]) roles.erase("loss");
  for (const auto& [role, tag] : overrides) roles[CanonicalRoleKey(role)] = tag;
  return roles;
}

bool RoleResolver::SetExplicit(std::string_view roles_json) {
  nlohmann::json j = nlohmann::json::parse(roles_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  // Stores imported before acc/val_acc were the one key say accuracy/val_accuracy
  // (data/roles.json's aliases); the key itself wins when both are there.
  for (const auto& [alias, key] : Table().aliases) {
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
