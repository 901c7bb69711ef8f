#include "ingest/text_log_reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "ingest/line_reader.h"
#include "ingest/test_util.h"

namespace trainscope::ingest {
namespace {

RunData Parse(const std::string& text, ImportStats* s = nullptr) {
  RunData run;
  ImportStats local;
  Status st = ReadTextLogBuffer(text, "log", &run, s ? s : &local);
  EXPECT_TRUE(st.ok()) << st.message();
  return run;
}

TEST(TextLog, MegatronIterationLines) {
  RunData run = Parse(
      " iteration      100/  500000 | consumed samples:        25600 | elapsed time per iteration (ms): 1234.5 | "
      "learning rate: 1.500000E-04 | global batch size:   256 | lm loss: 9.123456E+00 | loss scale: 65536.0 | "
      "grad norm: 2.345 | number of skipped iterations:   1 | number of nan iterations:   0 |\n"
      " iteration      200/  500000 | lm loss: nan | grad norm: inf |\n");
  EXPECT_EQ(run.FindScalar("lm loss")->steps, (std::vector<int64_t>{100, 200}));
  EXPECT_DOUBLE_EQ(run.FindScalar("lm loss")->values[0], 9.123456);
  EXPECT_TRUE(std::isnan(run.FindScalar("lm loss")->values[1]));
  EXPECT_EQ(run.FindScalar("grad norm")->values[1], INFINITY);
  EXPECT_EQ(run.FindScalar("elapsed time per iteration (ms)")->values[0], 1234.5);
  EXPECT_EQ(run.FindScalar("number of skipped iterations")->values[0], 1);
  EXPECT_EQ(run.meta["log_family"], "megatron");
}

TEST(TextLog, NanoGptLines) {
  RunData run = Parse(
      "iter 0: loss 10.9876, time 5123.45ms, mfu -100.00%\n"
      "iter 10: loss 9.5, time 123.4ms, mfu 12.34%\n"
      "step 500: train loss 2.1234, val loss 2.3456\n");
  EXPECT_EQ(run.FindScalar("loss")->steps, (std::vector<int64_t>{0, 10}));
  EXPECT_EQ(run.FindScalar("time_ms")->values[1], 123.4);
  EXPECT_EQ(run.FindScalar("mfu_pct")->values[1], 12.34);
  EXPECT_EQ(run.FindScalar("val loss")->steps[0], 500);
}

TEST(TextLog, DeepSpeedStepsAndOverflowSkips) {
  RunData run = Parse(
      "[2023-04-18 01:46:52,554] [INFO] [loss_scaler.py:188:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
      "step. Attempted loss scale: 65536, but hysteresis is 2. Reducing hysteresis to 1\n"
      "[2023-04-18 01:46:53,259] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
      "step. Attempted loss scale: 65536, reducing to 32768\n"
      "[2023-04-18 01:46:59,142] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=2, "
      "lr=[9.649992967150629e-06, 9.649992967150629e-06], mom=[(0.9, 0.95), (0.9, 0.95)]\n"
      "[2023-04-18 01:46:59,171] [INFO] [timer.py:199:stop] epoch=0/micro_step=10/global_step=10, "
      "RunningAvgSamplesPerSec=173.44, CurrSamplesPerSec=171.97, MemAllocated=3.96GB, MaxMemAllocated=22.95GB\n"
      "[2023-04-18 01:47:00,000] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
      "step. Attempted loss scale: 32768, reducing to 16384\n");
  const ScalarSeries* skip = run.FindScalar("amp/overflow_skip");
  ASSERT_NE(skip, nullptr);
  EXPECT_EQ(skip->steps, (std::vector<int64_t>{1, 2, 11}));
  EXPECT_EQ(run.FindScalar("amp/loss_scale")->values, (std::vector<double>{65536, 32768, 16384}));
  EXPECT_EQ(run.FindScalar("skipped")->values[0], 2);
  EXPECT_DOUBLE_EQ(run.FindScalar("lr")->values[0], 9.649992967150629e-06);
  EXPECT_EQ(run.FindScalar("MemAllocated_GB")->steps[0], 10);
  EXPECT_EQ(run.FindScalar("lr")->wall_times[0], 1681782419.142);  // 2023-04-18 01:46:59.142 UTC
}

TEST(TextLog, PytorchExamplesTable) {
  RunData run = Parse(
      "| epoch   1 |   200/ 2983 batches | lr 20.0000 | ms/batch 11.61 | loss   nan | ppl      nan\n"
      "| epoch   1 |   400/ 2983 batches | lr 20.0000 | ms/batch 11.49 | loss  5.50 | ppl   244.69\n"
      "-----------------------------------------------------------------------------------------\n"
      "| end of epoch   1 | time: 35.58s | valid loss   nan | valid ppl      nan\n"
      "| epoch   2 |   200/ 2983 batches | lr 5.0000 | ms/batch 11.49 | loss   nan | ppl      nan\n"
      "| End of training | test loss   nan | test ppl      nan\n");
  EXPECT_EQ(run.FindScalar("loss")->steps, (std::vector<int64_t>{200, 400, 3183}));
  EXPECT_TRUE(std::isnan(run.FindScalar("loss")->values[0]));
  EXPECT_EQ(run.FindScalar("loss")->values[1], 5.5);
  EXPECT_EQ(run.FindScalar("valid loss")->steps[0], 2983);
  EXPECT_EQ(run.FindScalar("time_s")->values[0], 35.58);
  EXPECT_EQ(run.FindScalar("ms/batch")->values.size(), 3u);
  EXPECT_EQ(run.FindScalar("test loss")->steps[0], 3183);
}

TEST(TextLog, HuggingFacePrintedDicts) {
  RunData run = Parse(
      "{'loss': 2.5, 'grad_norm': 1.25, 'learning_rate': 5e-05, 'epoch': 0.1}\n"
      "{'loss': nan, 'grad_norm': inf, 'learning_rate': 4e-05, 'epoch': 0.2}\n"
      "{'eval_loss': 2.25, 'eval_runtime': 1.5, 'epoch': 0.2}\n");
  EXPECT_EQ(run.FindScalar("loss")->steps, (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(std::isnan(run.FindScalar("loss")->values[1]));
  EXPECT_EQ(run.FindScalar("eval_loss")->steps[0], 2);
}

TEST(TextLog, GenericKeyValueLines) {
  RunData run = Parse(
      "epoch: 0|step: 3|act_loss: 0.25|cri_loss: -Infinity\n"
      "average reward score: -0.5\n"
      "loss=1.5 acc=0.25 step=7\n"
      "train_loss: 0.5, val_loss: NaN, iteration: 9\n");
  EXPECT_EQ(run.FindScalar("act_loss")->steps[0], 3);
  EXPECT_EQ(run.FindScalar("cri_loss")->values[0], -INFINITY);
  EXPECT_EQ(run.FindScalar("average reward score")->steps[0], 3);
  EXPECT_EQ(run.FindScalar("loss")->steps[0], 7);
  EXPECT_TRUE(std::isnan(run.FindScalar("val_loss")->values[0]));
  EXPECT_EQ(run.FindScalar("val_loss")->steps[0], 9);
}

TEST(TextLog, NothingRecognisedIsAnError) {
  RunData run;
  ImportStats s;
  Status st = ReadTextLogBuffer("hello world\nthis is prose.\n", "notes.txt", &run, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("notes.txt: no training metrics recognised in 2 lines"), std::string::npos)
      << st.message();
}

TEST(LineReader, OverlongLineIsSkippedAndReadingGoesOn) {
  testing::TempDir dir;
  const std::string path = dir.File("long.log");
  {
    std::ofstream out(path, std::ios::binary);
    out << "loss: 1\n" << std::string(3 << 20, 'x') << "\nloss: 2\n";
  }
  RunData run;
  ImportStats s;
  ASSERT_TRUE(ReadTextLog(path, &run, &s).ok());
  EXPECT_EQ(run.FindScalar("loss")->values, (std::vector<double>{1, 2}));
  EXPECT_EQ(s.damaged, 1u);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_NE(s.warnings[0].find("line 2 (offset 8)"), std::string::npos) << s.warnings[0];
}

TEST(LineReader, ARunawayLineStopsWithoutReadingItAll) {
  // A sparse file: 8 bytes of log, then 5 GB without a newline. Reading must stop after
  // kGiveUpBytes, holding at most kMaxLineBytes, and keep the first point.
  testing::TempDir dir;
  const std::string path = dir.File("huge.log");
  {
    std::ofstream out(path, std::ios::binary);
    out << "loss: 1\n";
  }
  std::filesystem::resize_file(path, (uint64_t{5} << 30) + 8);
  RunData run;
  ImportStats s;
  Status st = ReadTextLog(path, &run, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("line 2 (offset 8)"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("without a newline"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("1 points before it were kept"), std::string::npos) << st.message();
  EXPECT_EQ(run.FindScalar("loss")->values.size(), 1u);
  EXPECT_LT(s.bytes, uint64_t{200} << 20);
}

TEST(TextLog, RealLogsFromOtherTools) {
  const std::string dir = testing::TestDataDir() + "/raw_logs/";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no test data";
  {
    // 70 batch rows x 4 values, 5 end-of-epoch rows x 3, the end-of-training row x 2;
    // every loss and ppl is nan (SOURCES.md).
    RunData run;
    ImportStats s;
    ASSERT_TRUE(ReadTextLog(dir + "pytorch_wordlm_rnn_relu_all_nan.log", &run, &s).ok());
    EXPECT_EQ(s.scalars, 70u * 4 + 5 * 3 + 2);
    for (double v : run.FindScalar("loss")->values) EXPECT_TRUE(std::isnan(v));
    EXPECT_EQ(run.FindScalar("loss")->values.size(), 70u);
    EXPECT_EQ(run.FindScalar("lr")->values.back(), 0.3125);
    EXPECT_EQ(run.meta["log_family"], "pytorch_examples");
  }
  {
    // 139 OVERFLOW lines, 736 "step=" lines and 736 timer lines, 17 "ppl:" lines.
    RunData run;
    ImportStats s;
    ASSERT_TRUE(ReadTextLog(dir + "deepspeed_chat_sft_opt1.3b.log", &run, &s).ok());
    EXPECT_EQ(run.FindScalar("amp/overflow_skip")->values.size(), 139u);
    EXPECT_EQ(run.FindScalar("skipped")->values.size(), 736u);
    EXPECT_EQ(run.FindScalar("skipped")->values.back(), 139);
    EXPECT_EQ(run.FindScalar("RunningAvgSamplesPerSec")->values.size(), 736u);
    EXPECT_EQ(run.FindScalar("ppl")->values.size(), 17u);
    EXPECT_EQ(run.meta["log_family"], "deepspeed");
  }
  {
    // 14 OVERFLOW lines, 477 "act_loss" lines, 477 reward lines, 476 latency lines.
    RunData run;
    ImportStats s;
    ASSERT_TRUE(ReadTextLog(dir + "deepspeed_chat_rlhf_opt1.3b.log", &run, &s).ok());
    EXPECT_EQ(run.FindScalar("amp/overflow_skip")->values.size(), 14u);
    EXPECT_EQ(run.FindScalar("act_loss")->values.size(), 477u);
    EXPECT_EQ(run.FindScalar("average reward score")->values.size(), 477u);
    EXPECT_EQ(run.FindScalar("E2E latency_s")->values.size(), 476u);
    EXPECT_EQ(run.FindScalar("act_loss")->steps.back(), 476);
  }
}

}  // namespace
}  // namespace trainscope::ingest
