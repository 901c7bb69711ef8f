#include "ingest/detect.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "ingest/test_util.h"
#include "ingest/tfevents_writer.h"
#include "ingest/tfrecord.h"

namespace trainscope::ingest {
namespace {

Format Detect(const std::string& text, Status* status = nullptr) {
  Format f;
  Status s = DetectFormatFromPrefix(text, "f", true, &f);
  if (status) *status = s;
  return f;
}

TEST(Detect, ByContentNotName) {
  std::string tfevents;
  AppendTfRecord(EncodeScalarEvent("a", 1, 0, 1.0f), &tfevents);
  EXPECT_EQ(Detect(tfevents), Format::kTfEvents);
  EXPECT_EQ(Detect(std::string("SQLite format 3\0rest", 20)), Format::kTrainscopeStore);
  EXPECT_EQ(Detect("{\n  \"global_step\": 5,\n  \"log_history\": [\n"), Format::kHfTrainerState);
  EXPECT_EQ(Detect("{\"lm loss\": {\"start_step\": 1, \"step_interval\": 5, \"values\": {\"1\": 2.0}}}"),
            Format::kMegatronGolden);
  EXPECT_EQ(Detect("{\"step\": 1, \"loss\": NaN}\n{\"step\": 2, \"loss\": 1.0}\n"), Format::kJsonl);
  EXPECT_EQ(Detect("epoch,step,loss\n0,1,2.0\n0,2,\n"), Format::kCsv);
  EXPECT_EQ(Detect("iter 1: loss 2.0, time 10ms, mfu 1%\niter 2: loss 1.0, time 10ms, mfu 1%\n"), Format::kTextLog);
  EXPECT_EQ(Detect("iter 10: loss 2.5, time 12ms, mfu 3%\n"), Format::kTextLog);
  EXPECT_EQ(Detect("[2023-04-18 01:46:59,142] [INFO] [Rank 0] step=10, skipped=6, lr=[1e-05]\n"), Format::kTextLog);
  EXPECT_EQ(Detect("{'loss': 2.5, 'epoch': 0.1}\n"), Format::kTextLog);
}

TEST(Detect, BadInputSaysWhatWasExpected) {
  Status s;
  EXPECT_EQ(Detect("", &s), Format::kUnknown);
  EXPECT_NE(s.message().find("f: empty file"), std::string::npos) << s.message();
  Detect("[{\"step\": 1}]", &s);
  EXPECT_NE(s.message().find("found a JSON array"), std::string::npos) << s.message();
  Detect(std::string("\x01\x02\x00\x00garbage", 11), &s);
  EXPECT_NE(s.message().find("binary data"), std::string::npos) << s.message();
  Detect("Dear diary,\ntoday nothing happened.\n", &s);
  EXPECT_NE(s.message().find("no recognisable training metrics"), std::string::npos) << s.message();
  Detect("{\n  \"name\": \"x\"\n}\n", &s);
  EXPECT_NE(s.message().find("log_history"), std::string::npos) << s.message();
  EXPECT_TRUE(s.IsCorruption()) << StatusCodeName(s.code());  // the file is there, not in a known form
}

TEST(Detect, FormatNamesRoundTrip) {
  for (Format f : {Format::kTfEvents, Format::kHfTrainerState, Format::kMegatronGolden, Format::kJsonl, Format::kCsv,
                   Format::kTextLog}) {
    Format back;
    ASSERT_TRUE(ParseFormatName(FormatName(f), &back));
    EXPECT_EQ(back, f);
  }
  Format f;
  EXPECT_FALSE(ParseFormatName("parquet", &f));
}

TEST(Detect, EveryRealFileIsRecognised) {
  const std::string dir = testing::TestDataDir();
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no test data";
  const std::pair<const char*, Format> cases[] = {
      {"tfevents/keras_tf1_cnn_val_divergence.tfevents", Format::kTfEvents},
      {"hf_trainer_state/star_draft_gradnorm_spikes.json", Format::kHfTrainerState},
      {"raw_logs/megatron_golden_gpt3_tp2_pp2_a100.json", Format::kMegatronGolden},
      {"raw_logs/deepspeed_chat_sft_opt1.3b.log", Format::kTextLog},
      {"raw_logs/deepspeed_chat_rlhf_opt1.3b.log", Format::kTextLog},
      {"raw_logs/pytorch_wordlm_rnn_relu_all_nan.log", Format::kTextLog},
      {"csv_metrics/yolov8_fire_smoke_results.csv", Format::kCsv},
      {"csv_metrics/lightning_slm_lm_v0.csv", Format::kCsv},
  };
  for (const auto& [file, expected] : cases) {
    Format f;
    Status s = DetectFormat(dir + "/" + file, &f);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(f, expected) << file;
  }
}

TEST(Detect, ProfilerTracesAreSentToTrainscopeTrace) {
  Status s;
  // One line, a complete object: not JSONL, and not a trainer_state without log_history.
  EXPECT_EQ(Detect("{\"distributedInfo\": {\"rank\": 1}, \"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\"}]}", &s),
            Format::kUnknown);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("f: a PyTorch profiler (Kineto) trace"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("trainscope trace f"), std::string::npos) << s.message();
  EXPECT_EQ(Detect("{\n  \"schemaVersion\": 1,\n  \"traceEvents\": [\n", &s), Format::kUnknown);
  EXPECT_NE(s.message().find("trainscope trace"), std::string::npos) << s.message();
  EXPECT_EQ(Detect(std::string("\x1f\x8b\x08\0\0\0", 6), &s), Format::kUnknown);
  EXPECT_NE(s.message().find("gzip-compressed"), std::string::npos) << s.message();
  // A trainer state that mentions traceEvents nowhere is still one.
  EXPECT_EQ(Detect("{\n  \"global_step\": 5,\n  \"log_history\": [\n"), Format::kHfTrainerState);
}

}  // namespace
}  // namespace trainscope::ingest
