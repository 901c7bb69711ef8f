#include "doctor/roles.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace trainscope::doctor
