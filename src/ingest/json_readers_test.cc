#include "ingest/json_readers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "ingest/mapped_file.h"
#include "ingest/test_util.h"

namespace trainscope::ingest {
namespace {

TEST(TrainerState, ReadsEveryNumericKeyAtItsStep) {
  const std::string text = R"({"global_step": 20, "log_history": [
    {"epoch": 0.5, "grad_norm": NaN, "learning_rate": 1e-4, "loss": 2.5, "step": 10, "note": "text"},
    {"epoch": 1.0, "eval_loss": Infinity, "eval_custom": -Infinity, "step": 20},
    {"loss": 1.0}
  ]})";
  RunData run;
  ImportStats s;
  ASSERT_TRUE(ReadTrainerState(text, "ts.json", &run, &s).ok());
  EXPECT_EQ(run.FindScalar("loss")->steps, (std::vector<int64_t>{10}));
  EXPECT_TRUE(std::isnan(run.FindScalar("grad_norm")->values[0]));
  EXPECT_EQ(run.FindScalar("eval_loss")->values[0], INFINITY);
  EXPECT_EQ(run.FindScalar("eval_custom")->values[0], -INFINITY);
  EXPECT_EQ(run.FindScalar("epoch")->values.size(), 2u);
  EXPECT_EQ(s.scalars, 7u);
  EXPECT_EQ(s.skipped_values, 1u);  // "note"
  EXPECT_EQ(s.damaged, 1u);         // the entry without a step
  EXPECT_NE(run.meta["trainer_state"].find("\"global_step\":20"), std::string::npos);
}

TEST(TrainerState, ArrayAndBrokenJsonGiveClearErrors) {
  RunData run;
  ImportStats s;
  Status st = ReadTrainerState("[1, 2, 3]", "a.json", &run, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("a.json"), std::string::npos);
  EXPECT_NE(st.message().find("found an array"), std::string::npos) << st.message();
  st = ReadTrainerState("{\n  \"log_history\": [\n    {\"step\": 1,, }\n", "b.json", &run, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("b.json: line 3"), std::string::npos) << st.message();
  st = ReadTrainerState("{\"epoch\": 1}", "c.json", &run, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("log_history"), std::string::npos);
}

TEST(TrainerState, NanInsideStringsIsLeftAlone) {
  RunData run;
  ImportStats s;
  ASSERT_TRUE(ReadTrainerState(R"({"best_model_checkpoint": "NaN-Infinity", "log_history": [{"step": 1, "loss": NaN}]})",
                               "x", &run, &s).ok());
  EXPECT_NE(run.meta["trainer_state"].find("NaN-Infinity"), std::string::npos);
}

TEST(MegatronGolden, ObjectAndListForms) {
  RunData run;
  ImportStats s;
  ASSERT_TRUE(ReadMegatronGolden(R"({"lm loss": {"start_step": 1, "end_step": 10, "step_interval": 5,
      "values": {"1": 10.9, "5": 10.5, "10": NaN}},
      "iteration-time": {"start_step": 0, "end_step": 4, "step_interval": 2, "values": [4.8, 0.2, 0.21]}})",
                                  "g.json", &run, &s).ok());
  EXPECT_EQ(run.FindScalar("lm loss")->steps, (std::vector<int64_t>{1, 5, 10}));
  EXPECT_TRUE(std::isnan(run.FindScalar("lm loss")->values[2]));
  EXPECT_EQ(run.FindScalar("iteration-time")->steps, (std::vector<int64_t>{0, 2, 4}));
}

TEST(Jsonl, StepKeysNestedObjectsAndBadLines) {
  RunData run;
  ImportStats s;
  const std::string text =
      "{\"step\": 5, \"loss\": 1.5, \"val\": {\"loss\": 2.0}}\n"
      "not json\n"
      "[1,2]\n"
      "\n"
      "{\"global_step\": 6, \"loss\": NaN, \"name\": \"x\"}\n";
  ASSERT_TRUE(ReadJsonlBuffer(text, "m.jsonl", &run, &s).ok());
  EXPECT_EQ(run.FindScalar("loss")->steps, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(run.FindScalar("val/loss")->values[0], 2.0);
  EXPECT_EQ(s.damaged, 2u);
  ASSERT_GE(s.warnings.size(), 2u);
  EXPECT_NE(s.warnings[0].find("m.jsonl: line 2"), std::string::npos) << s.warnings[0];
}

TEST(JsonReaders, RealFilesFromOtherTools) {
  const std::string dir = testing::TestDataDir();
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no test data";
  // Counted independently with Python's json module (numeric values other than "step").
  struct Case {
    const char* file;
    uint64_t entries, scalars, tags;
  };
  const Case cases[] = {
      {"hf_trainer_state/mt5_summarize_trainer_state.json", 770, 2730, 11},
      {"hf_trainer_state/multi_eval_groups_trainer_state.json", 216, 1236, 34},
      {"hf_trainer_state/star_draft_gradnorm_spikes.json", 2000, 36000, 18},
      {"hf_trainer_state/t5_summarization_trainer_state.json", 431, 1726, 9},
      {"hf_trainer_state/tinyllama_sft_trl_trainer_state.json", 200, 1214, 12},
      {"hf_trainer_state/whisper_tiny_100k_steps_trainer_state.json", 2101, 6606, 13},
  };
  for (const Case& c : cases) {
    std::unique_ptr<MappedFile> f;
    ASSERT_TRUE(MappedFile::Open(dir + "/" + c.file, &f).ok());
    RunData run;
    ImportStats s;
    ASSERT_TRUE(ReadTrainerState(f->view(), c.file, &run, &s).ok()) << c.file;
    EXPECT_EQ(s.records, c.entries) << c.file;
    EXPECT_EQ(s.scalars, c.scalars) << c.file;
    EXPECT_EQ(run.scalars.size(), c.tags) << c.file;
    EXPECT_EQ(s.damaged, 0u) << c.file;
  }
  std::unique_ptr<MappedFile> f;
  ASSERT_TRUE(MappedFile::Open(dir + "/raw_logs/megatron_golden_gpt3_tp2_pp2_a100.json", &f).ok());
  RunData run;
  ImportStats s;
  ASSERT_TRUE(ReadMegatronGolden(f->view(), "golden", &run, &s).ok());
  EXPECT_EQ(s.scalars, 55u);
  EXPECT_EQ(run.scalars.size(), 5u);
  EXPECT_EQ(run.FindScalar("lm loss")->values.front(), 10.92335);
}

}  // namespace
}  // namespace trainscope::ingest
