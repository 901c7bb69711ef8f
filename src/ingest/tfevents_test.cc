#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ingest/proto_wire.h"
#include "ingest/test_util.h"
#include "ingest/tfevents_reader.h"
#include "ingest/tfevents_writer.h"
#include "ingest/tfrecord.h"

namespace trainscope::ingest {
namespace {

using testing::TempDir;

std::string Frame(const std::string& event) {
  std::string out;
  AppendTfRecord(event, &out);
  return out;
}

// An Event with one Summary.Value holding `value_fields` (already encoded) after the tag.
std::string EventWithValue(int64_t step, const std::string& tag, const wire::Writer& extra) {
  wire::Writer value;
  value.Bytes(1, tag);
  value.mutable_data() += extra.data();
  wire::Writer summary;
  summary.Bytes(1, value.data());
  wire::Writer event;
  event.Double(1, 1700000000.5);
  event.Varint(2, static_cast<uint64_t>(step));
  event.Bytes(5, summary.data());
  return event.data();
}

std::string TensorValue(int dtype, const std::string& content, const std::string& plugin = "",
                        std::vector<int64_t> dims = {}) {
  wire::Writer shape;
  for (int64_t d : dims) {
    wire::Writer dim;
    dim.Varint(1, static_cast<uint64_t>(d));
    shape.Bytes(2, dim.data());
  }
  wire::Writer tensor;
  tensor.Varint(1, static_cast<uint64_t>(dtype));
  tensor.Bytes(2, shape.data());
  tensor.Bytes(4, content);
  wire::Writer extra;
  if (!plugin.empty()) {
    wire::Writer pd;
    pd.Bytes(1, plugin);
    wire::Writer md;
    md.Bytes(1, pd.data());
    extra.Bytes(9, md.data());
  }
  extra.Bytes(8, tensor.data());
  return extra.data();
}

TEST(TfEvents, WriterOutputReadsBackExactly) {
  TempDir dir;
  std::unique_ptr<TfEventsWriter> w;
  ASSERT_TRUE(TfEventsWriter::CreateFile(dir.File("events.out.tfevents.1"), 1.0, &w).ok());
  const double values[] = {1.5, -0.25, std::nan(""), INFINITY, 3.0e-8};
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(w->AddScalar("train/loss", i * 10, 100.0 + i, values[i]).ok());
  TensorStats stats = ComputeTensorStats(std::vector<double>{0, 0, 0.5, -3, 1e-3, 7, 7.5}.data(), 7, true);
  ASSERT_TRUE(w->AddHistogram("grad/w", 40, 104.0, stats).ok());
  ASSERT_TRUE(w->Close().ok());

  RunData run;
  ImportStats s;
  ASSERT_TRUE(ReadTfEventsFile(dir.File("events.out.tfevents.1"), 0, &run, &s).ok());
  const ScalarSeries* loss = run.FindScalar("train/loss");
  ASSERT_NE(loss, nullptr);
  ASSERT_EQ(loss->values.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(loss->steps[i], i * 10);
    EXPECT_EQ(loss->wall_times[i], 100.0 + i);
    if (std::isnan(values[i])) EXPECT_TRUE(std::isnan(loss->values[i]));
    else EXPECT_EQ(loss->values[i], static_cast<double>(static_cast<float>(values[i])));
  }
  const TensorStatsSeries* h = run.FindTensorStats("grad/w");
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(h->stats.size(), 1u);
  const TensorStats& back = h->stats[0];
  EXPECT_EQ(back.numel, 7u);
  EXPECT_EQ(back.zeros, 2u);
  EXPECT_DOUBLE_EQ(back.sum, stats.sum);
  EXPECT_DOUBLE_EQ(back.sum_squares, stats.sum_squares);
  EXPECT_EQ(back.exponent_counts, stats.exponent_counts);
  EXPECT_EQ(s.scalars, 5u);
  EXPECT_EQ(s.tensor_stats, 1u);
  EXPECT_EQ(s.records, 7u);  // file_version + 6
  EXPECT_EQ(s.damaged, 0u);
}

TEST(TfEvents, ResumesAFileStillBeingWritten) {
  TempDir dir;
  const std::string path = dir.File("events.out.tfevents.2");
  std::string bytes = Frame(EncodeScalarEvent("a", 1, 0, 1.0f)) + Frame(EncodeScalarEvent("a", 2, 0, 2.0f));
  const std::string third = Frame(EncodeScalarEvent("a", 3, 0, 3.0f));
  testing::WriteFile(path, bytes + third.substr(0, 10));  // the writer is mid-record
  RunData run;
  ImportStats s;
  ASSERT_TRUE(ReadTfEventsFile(path, 0, &run, &s).ok());
  EXPECT_TRUE(s.partial_tail);
  EXPECT_EQ(s.resume_offset, bytes.size());
  EXPECT_EQ(run.FindScalar("a")->values.size(), 2u);
  testing::WriteFile(path, bytes + third + Frame(EncodeScalarEvent("a", 4, 0, 4.0f)));
  ImportStats s2;
  ASSERT_TRUE(ReadTfEventsFile(path, s.resume_offset, &run, &s2).ok());
  EXPECT_FALSE(s2.partial_tail);
  EXPECT_EQ(run.FindScalar("a")->steps, (std::vector<int64_t>{1, 2, 3, 4}));
}

// A writer flushes whenever it likes, so a reader may see any prefix of a record. Cut the
// file inside the length, inside the length's checksum, right after the header, halfway
// through the data and inside the data checksum: each time the points before the cut are
// kept, reading stops cleanly, and resuming after the writer appended the rest (in place,
// as a writer does) delivers every remaining point exactly once.
TEST(TfEvents, ResumesAfterAHalfWrittenRecordAtEveryCut) {
  const double values[] = {0.5, -2, 0, 3e-3, 40};
  const TensorStats grad = ComputeTensorStats(values, 5, true);
  std::vector<std::string> records;
  for (int step = 0; step < 4; ++step) {
    records.push_back(Frame(EncodeScalarEvent("loss", step, 100 + step, 1.0f / (step + 1))));
    records.push_back(Frame(EncodeHistogramEvent("grad/w", step, 100 + step, grad)));
  }
  std::string complete;
  for (const auto& r : records) complete += r;
  const size_t split_record = 5;  // the histogram of step 2 is the one cut
  size_t before = 0;
  for (size_t i = 0; i < split_record; ++i) before += records[i].size();
  const size_t length = records[split_record].size();
  for (const size_t cut : {size_t{3}, size_t{10}, size_t{12}, length / 2, length - 2}) {
    SCOPED_TRACE("cut " + std::to_string(cut) + " of " + std::to_string(length));
    TempDir dir;
    const std::string path = dir.File("events.out.tfevents.live");
    testing::WriteFile(path, complete.substr(0, before + cut));
    RunData run;
    ImportStats first;
    ASSERT_TRUE(ReadTfEventsFile(path, 0, &run, &first).ok());
    EXPECT_TRUE(first.partial_tail);
    EXPECT_EQ(first.resume_offset, before);
    EXPECT_EQ(first.bytes, before);
    EXPECT_EQ(first.damaged, 0u);
    EXPECT_TRUE(first.warnings.empty());
    EXPECT_EQ(first.scalars, 3u);       // steps 0, 1, 2
    EXPECT_EQ(first.tensor_stats, 2u);  // steps 0, 1
    {
      std::ofstream append(path, std::ios::binary | std::ios::app);
      append << complete.substr(before + cut);
    }
    ImportStats second;
    ASSERT_TRUE(ReadTfEventsFile(path, first.resume_offset, &run, &second).ok());
    EXPECT_FALSE(second.partial_tail);
    EXPECT_EQ(second.resume_offset, complete.size());
    EXPECT_EQ(second.scalars, 1u);
    EXPECT_EQ(second.tensor_stats, 2u);
    EXPECT_EQ(second.damaged, 0u);
    // Nothing appended since: resuming again delivers nothing.
    ImportStats third;
    ASSERT_TRUE(ReadTfEventsFile(path, second.resume_offset, &run, &third).ok());
    EXPECT_EQ(third.points(), 0u);
    EXPECT_FALSE(third.partial_tail);

    const ScalarSeries* loss = run.FindScalar("loss");
    const TensorStatsSeries* w = run.FindTensorStats("grad/w");
    ASSERT_TRUE(loss && w);
    EXPECT_EQ(loss->steps, (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(loss->values, (std::vector<double>{1.0f, 0.5f, 1.0f / 3, 0.25f}));
    EXPECT_EQ(w->steps, (std::vector<int64_t>{0, 1, 2, 3}));
    ASSERT_EQ(w->stats.size(), 4u);
    for (const TensorStats& back : w->stats) {
      EXPECT_EQ(back.numel, 5u);
      EXPECT_EQ(back.zeros, 1u);
      EXPECT_EQ(back.exponent_counts, grad.exponent_counts);
    }
  }
}

// The usual scalar layout is decoded by a short path; every variation of it by the general
// one. Both must give the same points, and the same treatment of a bad tag.
TEST(TfEvents, ScalarLayoutsReadTheSame) {
  auto event = [](bool wall_first, bool with_step, int64_t step, const std::string& tag, bool extra_field) {
    wire::Writer value;
    value.Bytes(1, tag);
    value.Float(2, 0.75f);
    if (extra_field) value.Varint(77, 1);
    wire::Writer summary;
    summary.Bytes(1, value.data());
    wire::Writer e;
    if (!wall_first && with_step) e.Varint(2, static_cast<uint64_t>(step));
    e.Double(1, 1234.5);
    if (wall_first && with_step) e.Varint(2, static_cast<uint64_t>(step));
    e.Bytes(5, summary.data());
    return Frame(e.data());
  };
  const std::string canonical = event(true, true, 7, "loss", false);
  ASSERT_EQ(canonical, Frame(EncodeScalarEvent("loss", 7, 1234.5, 0.75f)));  // what writers produce
  const std::string data = canonical + event(false, true, 8, "loss", false) + event(true, false, 0, "loss", false) +
                           event(true, true, -3, "loss", false) + event(true, true, int64_t{1} << 62, "loss", true) +
                           event(true, true, 9, std::string("bad\xff", 4), false) +
                           event(false, true, 10, std::string("bad\xfe", 4), false);
  RunData run;
  ImportStats s;
  ASSERT_TRUE(ReadTfEventsBuffer(data, "mem", 0, &run, &s).ok());
  const ScalarSeries* loss = run.FindScalar("loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->steps, (std::vector<int64_t>{7, 8, 0, -3, int64_t{1} << 62}));
  EXPECT_EQ(loss->values, std::vector<double>(5, 0.75));
  EXPECT_EQ(loss->wall_times, std::vector<double>(5, 1234.5));
  EXPECT_EQ(run.scalars.size(), 1u);  // the invalid tags were dropped, both ways alike
  EXPECT_EQ(s.scalars, 5u);
  EXPECT_EQ(s.damaged, 2u);
  ASSERT_EQ(s.warnings.size(), 2u);
  EXPECT_NE(s.warnings[0].find("mem: offset "), std::string::npos) << s.warnings[0];
  EXPECT_EQ(s.unknown_fields, 1u);
}

TEST(TfEvents, DamageKeepsWhatCameBefore) {
  TempDir dir;
  const std::string path = dir.File("events.out.tfevents.3");
  std::string good = Frame(EncodeScalarEvent("a", 1, 0, 1.0f));
  std::string bad = Frame(EncodeScalarEvent("a", 2, 0, 2.0f));
  bad[3] ^= 0x10;  // corrupt the header: length checksum mismatch
  testing::WriteFile(path, good + bad + Frame(EncodeScalarEvent("a", 3, 0, 3.0f)));
  RunData run;
  ImportStats s;
  Status st = ReadTfEventsFile(path, 0, &run, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(path), std::string::npos);
  EXPECT_NE(st.message().find("offset " + std::to_string(good.size())), std::string::npos) << st.message();
  EXPECT_EQ(run.FindScalar("a")->values.size(), 1u);
}

TEST(TfEvents, InvalidUtf8TagIsSkippedAndCounted) {
  RunData run;
  ImportStats s;
  const std::string data = Frame(EncodeScalarEvent("bad\xff\xfe", 1, 0, 1.0f)) + Frame(EncodeScalarEvent("ok", 1, 0, 2.0f));
  ASSERT_TRUE(ReadTfEventsBuffer(data, "mem", 0, &run, &s).ok());
  EXPECT_EQ(s.damaged, 1u);
  ASSERT_EQ(run.scalars.size(), 1u);
  EXPECT_EQ(run.scalars[0].tag, "ok");
  ASSERT_FALSE(s.warnings.empty());
  EXPECT_NE(s.warnings[0].find("mem: offset 0"), std::string::npos) << s.warnings[0];
}

TEST(TfEvents, RankZeroTensorsOfEveryFloatTypeAreScalars) {
  std::string data;
  double d = 0.125;
  float f = -2.5f;
  uint16_t half = 0x3c00;  // 1.0
  uint16_t bf16 = 0x4040;  // 3.0
  data += Frame(EventWithValue(1, "d", [&] { wire::Writer w; w.mutable_data() = TensorValue(2, std::string(reinterpret_cast<char*>(&d), 8), "scalars"); return w; }()));
  data += Frame(EventWithValue(1, "f", [&] { wire::Writer w; w.mutable_data() = TensorValue(1, std::string(reinterpret_cast<char*>(&f), 4)); return w; }()));
  data += Frame(EventWithValue(1, "h", [&] { wire::Writer w; w.mutable_data() = TensorValue(19, std::string(reinterpret_cast<char*>(&half), 2)); return w; }()));
  data += Frame(EventWithValue(1, "b", [&] { wire::Writer w; w.mutable_data() = TensorValue(14, std::string(reinterpret_cast<char*>(&bf16), 2)); return w; }()));
  data += Frame(EventWithValue(1, "text", [&] { wire::Writer w; w.mutable_data() = TensorValue(7, "xyz", "text"); return w; }()));
  RunData run;
  ImportStats s;
  ASSERT_TRUE(ReadTfEventsBuffer(data, "mem", 0, &run, &s).ok());
  EXPECT_EQ(run.FindScalar("d")->values[0], 0.125);
  EXPECT_EQ(run.FindScalar("f")->values[0], -2.5);
  EXPECT_EQ(run.FindScalar("h")->values[0], 1.0);
  EXPECT_EQ(run.FindScalar("b")->values[0], 3.0);
  EXPECT_EQ(run.FindScalar("text"), nullptr);
  EXPECT_EQ(s.skipped_values, 1u);
  EXPECT_EQ(s.scalars, 4u);
}

TEST(TfEvents, Tf2HistogramTensorBecomesTensorStats) {
  // Two buckets: (0, 1] x3 and (1, 2] x1, as TF2's histogram plugin writes them.
  const double rows[] = {0, 1, 3, 1, 2, 1};
  std::string content(reinterpret_cast<const char*>(rows), sizeof(rows));
  std::string data = Frame(EventWithValue(5, "w", [&] { wire::Writer w; w.mutable_data() = TensorValue(2, content, "histograms", {2, 3}); return w; }()));
  RunData run;
  ImportStats s;
  ASSERT_TRUE(ReadTfEventsBuffer(data, "mem", 0, &run, &s).ok());
  const TensorStatsSeries* h = run.FindTensorStats("w");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->stats[0].numel, 4u);
  EXPECT_EQ(h->steps[0], 5);
  EXPECT_EQ(h->stats[0].min, 0.0);
  EXPECT_EQ(h->stats[0].max, 2.0);
}

TEST(TfEvents, UnknownFieldsAreSkippedAndCounted) {
  wire::Writer event;
  event.Double(1, 5.0);
  event.Varint(2, 3);
  event.Varint(99, 1234);
  event.Bytes(98, "future");
  RunData run;
  ImportStats s;
  ASSERT_TRUE(ReadTfEventsBuffer(Frame(event.data()), "mem", 0, &run, &s).ok());
  EXPECT_EQ(s.unknown_fields, 2u);
  EXPECT_EQ(s.damaged, 0u);
}

TEST(TfEvents, MalformedEventIsCountedNotFatal) {
  RunData run;
  ImportStats s;
  const std::string data = Frame("\x0a\xff\xff\xff\xff\x0f") + Frame(EncodeScalarEvent("ok", 1, 0, 2.0f));
  ASSERT_TRUE(ReadTfEventsBuffer(data, "mem", 0, &run, &s).ok());
  EXPECT_EQ(s.damaged, 1u);
  EXPECT_EQ(run.FindScalar("ok")->values.size(), 1u);
}

TEST(TfEvents, LogdirRunsAndFileOrder) {
  TempDir dir;
  std::filesystem::create_directories(dir.File("a"));
  std::filesystem::create_directories(dir.File("b/c"));
  testing::WriteFile(dir.File("a/events.out.tfevents.2.host"), Frame(EncodeScalarEvent("x", 2, 0, 2.0f)));
  testing::WriteFile(dir.File("a/events.out.tfevents.1.host"), Frame(EncodeScalarEvent("x", 1, 0, 1.0f)));
  testing::WriteFile(dir.File("b/c/events.out.tfevents.1.host"), Frame(EncodeScalarEvent("y", 1, 0, 1.0f)));
  testing::WriteFile(dir.File("b/notes.txt"), "unrelated");
  std::vector<TfEventsRun> runs;
  ASSERT_TRUE(FindTfEventsRuns(dir.path(), &runs).ok());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].name, "a");
  EXPECT_EQ(runs[1].name, "b/c");
  RunData run;
  ImportStats s;
  ASSERT_TRUE(ReadTfEventsRun(runs[0], &run, &s).ok());
  EXPECT_EQ(run.FindScalar("x")->steps, (std::vector<int64_t>{1, 2}));
}

TEST(TfEvents, HistogramToStatsOfTensorBoardBuckets) {
  // TensorBoard-style: first bucket from -DBL_MAX; values -1.5 (x2) and 0.75 (x1).
  const double big = 1.7976931348623157e308;
  TensorStats s = HistogramToStats(-1.5, 0.75, 3, -2.25, 5.0625, {-big, -1.4, 0.7}, {-1.4, 0.7, 0.8}, {2, 0, 1});
  EXPECT_EQ(s.numel, 3u);
  EXPECT_EQ(s.min, -1.5);
  EXPECT_EQ(s.max, 0.75);
  EXPECT_EQ(s.abs_max, 1.5);
  // -1.5 lands in [1, 2): bin of 1.0; 0.75 in [0.5, 1).
  EXPECT_EQ(s.exponent_counts[TensorStats::ExponentBin(1.45)], 2u);
  EXPECT_EQ(s.exponent_counts[TensorStats::ExponentBin(0.75)], 1u);
}

// The files in ../shared/testdata/external/tfevents, counted independently with a small
// Python protobuf walker (tests/python/test_ingest.py does it again at test time).
TEST(TfEvents, RealFilesFromOtherTools) {
  const std::string dir = testing::TestDataDir() + "/tfevents/";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no " << dir;
  struct Case {
    const char* file;
    uint64_t scalars, histograms, tags;
  };
  const Case cases[] = {
      {"hf_t5_summarization_trainer.tfevents", 1726, 0, 9},
      {"keras_tf1_cnn_val_divergence.tfevents", 120, 0, 6},
      {"pt_histogram_demo.tfevents", 0, 10, 1},
      {"pt_hparams_demo.tfevents", 2, 0, 2},
      {"pt_pr_curve_demo.tfevents", 0, 0, 0},
      {"sb3_dqn_seed1.tfevents", 1190, 0, 6},
      {"sb3_dqn_seed2.tfevents", 1190, 0, 6},
      {"tb_reducer_duplicate_steps_run1.tfevents", 420, 0, 2},
      {"tb_reducer_strict_run1.tfevents", 100, 0, 1},
      {"yolov8_fire_smoke.tfevents", 4308, 0, 10},
  };
  for (const Case& c : cases) {
    RunData run;
    ImportStats s;
    ASSERT_TRUE(ReadTfEventsFile(dir + c.file, 0, &run, &s).ok()) << c.file;
    EXPECT_EQ(s.scalars, c.scalars) << c.file;
    EXPECT_EQ(s.tensor_stats, c.histograms) << c.file;
    EXPECT_EQ(run.scalars.size() + run.tensor_stats.size(), c.tags) << c.file;
    EXPECT_EQ(s.damaged, 0u) << c.file;
    EXPECT_FALSE(s.partial_tail) << c.file;
  }
  RunData hp;
  ImportStats s;
  ASSERT_TRUE(ReadTfEventsFile(dir + "pt_hparams_demo.tfevents", 0, &hp, &s).ok());
  ASSERT_TRUE(hp.meta.count("hparams"));
  EXPECT_NE(hp.meta["hparams"].find("\"optimizer\":\"SGD\""), std::string::npos) << hp.meta["hparams"];
  EXPECT_NE(hp.meta["hparams"].find("\"batch_size\":32.0"), std::string::npos) << hp.meta["hparams"];
  // Keras: the validation loss rises every epoch, as SOURCES.md says.
  RunData keras;
  ASSERT_TRUE(ReadTfEventsFile(dir + "keras_tf1_cnn_val_divergence.tfevents", 0, &keras, &s).ok());
  const ScalarSeries* val = keras.FindScalar("epoch_val_loss");
  ASSERT_NE(val, nullptr);
  EXPECT_NEAR(val->values.front(), 0.84, 0.01);
  EXPECT_NEAR(val->values.back(), 3.73, 0.01);
  // Duplicate steps are kept, every one.
  RunData dup;
  ASSERT_TRUE(ReadTfEventsFile(dir + "yolov8_fire_smoke.tfevents", 0, &dup, &s).ok());
  EXPECT_GT(dup.scalars[0].steps.size(), 25u);
}

}  // namespace
}  // namespace trainscope::ingest
