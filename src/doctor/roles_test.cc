#include "doctor/roles.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace trainscope::doctor {
namespace {

TEST(Roles, DesignTagsWin) {
  RoleResolver r;
  for (const char* t : {"train/loss_scale", "loss", "train/loss", "val/loss", "opt/lr", "grad/global_norm", "val/acc"}) {
    r.See(t);
  }
  EXPECT_EQ(r.Get(Role::kLoss), "train/loss");
  EXPECT_EQ(r.Get(Role::kValLoss), "val/loss");
  EXPECT_EQ(r.Get(Role::kLr), "opt/lr");
  EXPECT_EQ(r.Get(Role::kGradNorm), "grad/global_norm");
  EXPECT_EQ(r.Get(Role::kValAcc), "val/acc");
  EXPECT_FALSE(r.Has(Role::kAcc));
}

TEST(Roles, OtherToolsNames) {
  RoleResolver r;
  for (const char* t : {"learning_rate", "eval_loss", "lm loss", "grad_norm", "epoch"}) r.See(t);
  EXPECT_EQ(r.Get(Role::kLoss), "lm loss");
  EXPECT_EQ(r.Get(Role::kValLoss), "eval_loss");
  EXPECT_EQ(r.Get(Role::kLr), "learning_rate");
  EXPECT_EQ(r.Get(Role::kGradNorm), "grad_norm");
}

TEST(Roles, ScaleIsNotALoss) {
  EXPECT_EQ(RoleScore("loss_scale", Role::kLoss), 0);
  EXPECT_EQ(RoleScore("val/loss", Role::kLoss), 0);
  EXPECT_GT(RoleScore("Loss/train", Role::kLoss), 0);
  EXPECT_EQ(RoleScore("train/accuracy", Role::kValAcc), 0);
  EXPECT_GT(RoleScore("val/macro_f1", Role::kMacroF1), RoleScore("val/f1_class3", Role::kMacroF1));
}

TEST(Roles, ExplicitMapIsNeverReplaced) {
  RoleResolver r;
  ASSERT_TRUE(r.SetExplicit(R"({"loss": "objective", "lr": "opt/lr/head"})"));
  r.See("train/loss");
  r.See("opt/lr");
  EXPECT_EQ(r.Get(Role::kLoss), "objective");
  EXPECT_EQ(r.Get(Role::kLr), "opt/lr/head");
  EXPECT_FALSE(r.SetExplicit("[1,2]"));
}

// The importers and the doctor once had a resolver each: the importers stored
// {"accuracy": ...} and the doctor read "acc". Now one table and one resolver serve both.
TEST(Roles, ImportersAndDoctorAgreeOnAccuracy) {
  const std::vector<std::string> tags = {"train/loss", "eval_accuracy", "accuracy", "eval_loss", "learning_rate"};
  const RoleMap imported = ResolveRoles("tfevents", tags);
  EXPECT_EQ(imported.count("accuracy"), 0u);
  EXPECT_EQ(imported.count("val_accuracy"), 0u);
  ASSERT_EQ(imported.count("acc"), 1u);
  EXPECT_EQ(imported.at("acc"), "accuracy");
  EXPECT_EQ(imported.at("val_acc"), "eval_accuracy");

  // The doctor reads the stored map, and by itself picks the same tags.
  nlohmann::json stored(imported);
  RoleResolver from_meta, by_name;
  ASSERT_TRUE(from_meta.SetExplicit(stored.dump()));
  for (const auto& t : tags) by_name.See(t);
  for (size_t r = 0; r < kRoleCount; ++r) {
    const Role role = static_cast<Role>(r);
    const auto it = imported.find(RoleKey(role));
    EXPECT_EQ(from_meta.Get(role), it == imported.end() ? "" : it->second) << RoleKey(role);
    EXPECT_EQ(by_name.Get(role), from_meta.Get(role)) << RoleKey(role);
  }
  EXPECT_EQ(from_meta.Get(Role::kValAcc), "eval_accuracy");

  // Stores written before, and users' overrides, may still say accuracy/val_accuracy.
  RoleResolver old_store;
  ASSERT_TRUE(old_store.SetExplicit(R"({"accuracy": "top1", "val_accuracy": "val_top1"})"));
  EXPECT_EQ(old_store.Get(Role::kAcc), "top1");
  EXPECT_EQ(old_store.Get(Role::kValAcc), "val_top1");
  const RoleMap overridden = ResolveRoles("csv", tags, {{"val_accuracy", "my/val"}});
  EXPECT_EQ(overridden.at("val_acc"), "my/val");
  EXPECT_EQ(overridden.count("val_accuracy"), 0u);
  EXPECT_EQ(CanonicalRoleKey("accuracy"), "acc");
}

}  // namespace
}  // namespace trainscope::doctor
