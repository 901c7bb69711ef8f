#include "doctor/knowledge.h"

#include <gtest/gtest.h>

namespace trainscope::doctor {
namespace {

TEST(Knowledge, BuiltinHasEveryDesignCodeAndCause) {
  const KnowledgeBase& kb = KnowledgeBase::Builtin();
  for (const char* code :
       {"NONFINITE_LOSS", "NONFINITE_GRAD", "NONFINITE_ACTIVATION", "NONFINITE_INPUT", "NONFINITE_WEIGHT", "LOSS_SPIKE",
        "LOSS_DIVERGENCE", "LOSS_PLATEAU", "LOSS_OSCILLATION", "NEGATIVE_LOSS", "OVERFITTING", "METRIC_STALL",
        "GRAD_EXPLOSION", "GRAD_VANISHING", "GRAD_NOT_ZEROED", "DEAD_UNITS", "ACTIVATION_SATURATION",
        "UPDATE_RATIO_HIGH", "UPDATE_RATIO_LOW", "WEIGHT_SYMMETRY", "LR_ANOMALY", "DATALOADER_BOTTLENECK",
        "MEMORY_LEAK", "LOW_MFU", "THROUGHPUT_DROP", "STRAGGLER", "POOR_SCALING", "FP16_OVERFLOW", "FP16_UNDERFLOW",
        "BF16_STALE_UPDATE", "ACTIVATION_DRIFT", "NORM_SCALE_COLLAPSE", "METRIC_IMBALANCE", "ARCHITECTURE_WARNING",
        "LABEL_OUT_OF_RANGE", "UNNORMALIZED_INPUT", "HOST_PAGE_FAULTS"}) {
    const CodeInfo* info = kb.Code(code);
    ASSERT_NE(info, nullptr) << code;
    EXPECT_FALSE(info->title.empty()) << code;
    EXPECT_FALSE(info->actions.empty()) << code;
  }
  for (const char* cause : {"lr_too_high", "gradient_explosion", "log_of_zero", "division_by_zero", "sqrt_at_zero",
                            "exp_overflow", "input_nonfinite", "label_out_of_range", "precision_overflow", "bad_init",
                            "constant_init", "missing_zero_grad", "unnormalized_input", "batchnorm_stats",
                            "lr_too_low", "insufficient_capacity", "overfitting", "slow_dataloader", "retained_graph",
                            "saturating_activation", "dying_relu", "allocator_returns_memory"}) {
    const CauseInfo* info = kb.Cause(cause);
    ASSERT_NE(info, nullptr) << cause;
    EXPECT_FALSE(info->actions.empty()) << cause;
    EXPECT_FALSE(info->raised_by.empty()) << cause;
  }
}

TEST(Knowledge, ActionsComeFromTheLikelyCausesFirst) {
  Finding f;
  f.code = "NONFINITE_GRAD";
  f.causes = {{"sqrt_at_zero", 0.8}, {"lr_too_high", 0.1}};
  const auto actions = KnowledgeBase::Builtin().ActionsFor(f);
  ASSERT_FALSE(actions.empty());
  EXPECT_NE(actions.front().find("sqrt"), std::string::npos);
  for (const auto& a : actions) EXPECT_EQ(a.find("learning rate 3-10x"), std::string::npos) << "unlikely cause's action";
}

TEST(Knowledge, ParseErrorsNameTheProblem) {
  KnowledgeBase kb;
  Status s = KnowledgeBase::Parse("{\"codes\": {}, ", "kb.json", &kb);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("kb.json"), std::string::npos);
  s = KnowledgeBase::Parse(R"({"codes": {"X": {"causes": ["nope"]}}, "causes": {}})", "kb.json", &kb);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown cause id 'nope'"), std::string::npos);
  s = KnowledgeBase::Parse(R"({"codes": {"X": {"severity": "loud"}}, "causes": {}})", "kb.json", &kb);
  EXPECT_NE(s.message().find("severity"), std::string::npos);
  s = KnowledgeBase::Parse(R"({"codes": {"X": {"view": "elsewhere"}}, "causes": {}})", "kb.json", &kb);
  EXPECT_NE(s.message().find("codes.X.view: expected one of scalars, gradients, activations, performance, got \"elsewhere\""),
            std::string::npos) << s.message();
  s = KnowledgeBase::Parse(R"({"codes": {"X": {"loss_mark": 1}}, "causes": {}})", "kb.json", &kb);
  EXPECT_NE(s.message().find("codes.X.loss_mark: expected one of point, range, got 1"), std::string::npos) << s.message();
}

// What a code means beside its words: the doctor folds consequences into a root finding by
// "consequence_of", the report marks the loss chart by "loss_mark", the dashboard opens a
// finding's view by "view"; each is set where it belongs.
TEST(Knowledge, FindingSemanticsAreInTheTable) {
  const KnowledgeBase& kb = KnowledgeBase::Builtin();
  EXPECT_EQ(kb.Code("LOSS_PLATEAU")->consequence_of, "broken_weights");
  EXPECT_EQ(kb.Code("GRAD_EXPLOSION")->consequence_of, "early_blowup");
  EXPECT_EQ(kb.Code("NONFINITE_LOSS")->consequence_of, "");  // a root, never a consequence
  EXPECT_EQ(kb.Code("LOSS_SPIKE")->loss_mark, "point");
  EXPECT_EQ(kb.Code("OVERFITTING")->loss_mark, "range");
  EXPECT_EQ(kb.Code("DEAD_UNITS")->loss_mark, "");
  EXPECT_EQ(kb.Code("STRAGGLER")->view, "performance");
  EXPECT_EQ(kb.Code("LR_ANOMALY")->view, "scalars");
}

}  // namespace
}  // namespace trainscope::doctor
