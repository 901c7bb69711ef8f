// The trace reader and analyses on small traces written as real files, with every number
// worked out by hand; the real traces of ../shared/testdata are checked against HTA in
// tests/python/test_trace.py.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "perf/trace.h"
#include "perf/trace_analysis.h"
#include "perf/trace_json.h"

namespace trainscope::perf {
namespace {

namespace fs = std::filesystem;

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("trace_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string WriteGz(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
    return path;
  }
  fs::path dir_;
};

std::string Kernel(const std::string& name, double ts, double dur, int stream, int corr) {
  return "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"" + name + "\",\"pid\":0,\"tid\":7,\"ts\":" + std::to_string(ts) +
         ",\"dur\":" + std::to_string(dur) + ",\"args\":{\"stream\":" + std::to_string(stream) +
         ",\"correlation\":" + std::to_string(corr) + "}}";
}
std::string Launch(double ts, double dur, int corr) {
  return "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":1,\"tid\":1,\"ts\":" +
         std::to_string(ts) + ",\"dur\":" + std::to_string(dur) + ",\"args\":{\"correlation\":" + std::to_string(corr) + "}}";
}
std::string Annotation(const std::string& name, double ts, double dur) {
  return "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"" + name + "\",\"pid\":1,\"tid\":1,\"ts\":" +
         std::to_string(ts) + ",\"dur\":" + std::to_string(dur) + "}";
}
std::string Doc(const std::vector<std::string>& events, const std::string& extra = "") {
  std::string out = "{\"schemaVersion\":1," + extra + "\"traceEvents\":[";
  for (size_t i = 0; i < events.size(); ++i) out += (i ? "," : "") + events[i];
  return out + "]}";
}

// Two compute kernels overlapping on two streams, an NCCL kernel, a memcpy, gaps:
//   gemm     [0, 10)   stream 7
//   relu     [5, 20)   stream 8   -> compute union [0, 20) = 20
//   nccl     [25, 35)  stream 9   (non-compute)
//   Memcpy   [40, 50)  stream 7   (non-compute)
// span 50, busy 20 + 10 + 10 = 40, idle 10, compute 20, non-compute 20.
TEST_F(TraceTest, TemporalBreakdownByHand) {
  const std::string path = Write("t.json", Doc({Launch(-5, 1, 1), Kernel("gemm", 0, 10, 7, 1), Launch(-4, 1, 2),
                                                 Kernel("relu", 5, 15, 8, 2), Launch(-3, 1, 3),
                                                 Kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 25, 10, 9, 3),
                                                 Launch(45, 1, 4), Kernel("Memcpy DtoH (Device -> Pageable)", 40, 10, 7, 4)},
                                                "\"distributedInfo\":{\"rank\":3,\"world_size\":8,\"backend\":\"nccl\"},"));
  Trace trace;
  ASSERT_TRUE(ReadKinetoTrace(path, &trace).ok());
  EXPECT_EQ(trace.rank, 3);
  EXPECT_EQ(trace.world_size, 8);
  EXPECT_EQ(trace.backend, "nccl");
  const RankTraceReport r = AnalyzeRank(trace, {});
  EXPECT_TRUE(r.has_gpu);
  EXPECT_DOUBLE_EQ(r.temporal.kernel_us, 50);
  EXPECT_DOUBLE_EQ(r.temporal.idle_us, 10);
  EXPECT_DOUBLE_EQ(r.temporal.compute_us, 20);
  EXPECT_DOUBLE_EQ(r.temporal.non_compute_us, 20);
  EXPECT_DOUBLE_EQ(r.temporal.idle_pct, 20);
  EXPECT_DOUBLE_EQ(r.temporal.compute_pct, 40);
  // Overlap: NCCL [25,35) never meets compute [0,20).
  EXPECT_DOUBLE_EQ(r.comm_us, 10);
  EXPECT_DOUBLE_EQ(r.comm_overlap_pct, 0);
  // Stream 7: gemm ends 10, Memcpy starts 40 (gap 30); its launch at 45 is after 10: host wait.
  EXPECT_DOUBLE_EQ(r.idle.host_wait_us, 30);
  EXPECT_DOUBLE_EQ(r.idle.other_us, 0);
  // Launch delays from each launch call's end: 4, 8, 27, and -6 clipped to 0 -> median 6.
  EXPECT_EQ(r.launch.count, 4);
  EXPECT_DOUBLE_EQ(r.launch.median_us, 6);
  EXPECT_DOUBLE_EQ(r.launch.max_us, 27);
  ASSERT_FALSE(r.top_kernels.empty());
  EXPECT_EQ(r.top_kernels[0].name, "relu");
}

TEST_F(TraceTest, OverlapAndOtherIdle) {
  // NCCL [0, 10) with compute [5, 15): 5 of 10 overlapped. Stream 7: a then b with a 4 us gap
  // launched before a ended: not host wait, above 30 us: other.
  const std::string path = Write("o.json", Doc({Launch(-10, 1, 1), Kernel("ncclKernel_x", 0, 10, 9, 1), Launch(-9, 1, 2),
                                                 Kernel("a", 5, 10, 7, 2), Launch(-8, 1, 3), Kernel("b", 55, 1, 7, 3),
                                                 Launch(-7, 1, 4), Kernel("c", 66, 1, 7, 4)}));
  Trace trace;
  ASSERT_TRUE(ReadKinetoTrace(path, &trace).ok());
  const RankTraceReport r = AnalyzeRank(trace, {});
  EXPECT_DOUBLE_EQ(r.comm_overlap_pct, 50);
  EXPECT_DOUBLE_EQ(r.idle.other_us, 40);
  EXPECT_DOUBLE_EQ(r.idle.kernel_wait_us, 10);
  EXPECT_DOUBLE_EQ(r.idle.host_wait_us, 0);
}

TEST_F(TraceTest, LastProfilerStepLeftOutAsHtaDoes) {
  // Two steps; the kernel launched in the second (last) step is not counted.
  const std::string path = Write("s.json", Doc({Annotation("ProfilerStep#1", 0, 100), Annotation("ProfilerStep#2", 100, 100),
                                                 Launch(10, 1, 1), Kernel("k1", 20, 10, 7, 1), Launch(110, 1, 2),
                                                 Kernel("k2", 120, 40, 7, 2)}));
  Trace trace;
  ASSERT_TRUE(ReadKinetoTrace(path, &trace).ok());
  RankTraceReport r = AnalyzeRank(trace, {});
  EXPECT_EQ(r.gpu_events, 2);
  EXPECT_EQ(r.gpu_events_used, 1);
  EXPECT_DOUBLE_EQ(r.temporal.kernel_us, 10);
  TraceAnalysisOptions all;
  all.include_last_step = true;
  r = AnalyzeRank(trace, all);
  EXPECT_DOUBLE_EQ(r.temporal.kernel_us, 140);
  EXPECT_DOUBLE_EQ(r.temporal.idle_us, 90);
}

TEST_F(TraceTest, DataLoaderShareAndFindingOnCpuTraces) {
  auto steps = [](double loader) {
    std::vector<std::string> ev;
    for (int i = 0; i < 4; ++i) {
      ev.push_back(Annotation("ProfilerStep#" + std::to_string(i), i * 10000.0, 10000));
      ev.push_back(Annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", i * 10000.0 + 10, loader));
    }
    return ev;
  };
  Trace slow, fast;
  ASSERT_TRUE(ReadKinetoTrace(Write("slow.json", Doc(steps(6000))), &slow).ok());
  ASSERT_TRUE(ReadKinetoTrace(Write("fast.json", Doc(steps(500))), &fast).ok());
  TraceReport report = AnalyzeTraces({slow}, {});
  ASSERT_EQ(report.ranks.size(), 1u);
  EXPECT_DOUBLE_EQ(report.ranks[0].dataloader_share, 0.6);
  ASSERT_EQ(report.findings.size(), 1u);
  EXPECT_EQ(report.findings[0].code, "DATALOADER_BOTTLENECK");
  // 5 % of the step: no finding. And the threshold is the caller's: at 0.7, 60 % passes.
  EXPECT_TRUE(AnalyzeTraces({fast}, {}).findings.empty());
  TraceAnalysisOptions strict;
  strict.dataloader_share = 0.7;
  EXPECT_TRUE(AnalyzeTraces({slow}, strict).findings.empty());
}

TEST_F(TraceTest, CollectiveBandwidthFromMetadata) {
  // 1 M floats all-reduced on 4 ranks in 1 ms: algbw 4 GB/s, busbw 4 x 2*3/4 = 6 GB/s.
  const std::string ev =
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"record_param_comms\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":1000,"
      "\"args\":{\"Collective name\":\"allreduce\",\"In msg nelems\":1000000,\"Out msg nelems\":1000000,"
      "\"Group size\":4,\"dtype\":\"Float\"}}";
  Trace trace;
  ASSERT_TRUE(ReadKinetoTrace(Write("c.json", Doc({ev})), &trace).ok());
  const RankTraceReport r = AnalyzeRank(trace, {});
  ASSERT_EQ(r.collectives.size(), 1u);
  EXPECT_EQ(r.collectives[0].bytes, 4000000);
  EXPECT_NEAR(r.collectives[0].algbw_gbps, 4, 1e-9);
  EXPECT_NEAR(r.collectives[0].busbw_gbps, 6, 1e-9);
  EXPECT_FALSE(r.has_gpu);
}

// A Gloo range with record_shapes: its input is the message, its time the transfer's.
TEST_F(TraceTest, GlooCollectiveFromItsShapes) {
  auto gloo = [](const std::string& op, const std::string& dims) {
    return "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"gloo:" + op +
           "\",\"pid\":1,\"tid\":2,\"ts\":0,\"dur\":2000,\"args\":{\"Input type\":[\"float\"],\"Input Dims\":" + dims + "}}";
  };
  Trace trace;
  ASSERT_TRUE(ReadKinetoTrace(Write("g.json", Doc({gloo("all_reduce", "[[262144]]"), gloo("all_gather", "[[512, 512]]"),
                                                    gloo("barrier", "[]")},
                                                   "\"distributedInfo\":{\"rank\":0,\"world_size\":2},")),
                              &trace).ok());
  const RankTraceReport r = AnalyzeRank(trace, {});
  ASSERT_EQ(r.collectives.size(), 2u);
  // Sorted by name: all_gather (4 x 262144 bytes gathered from 2 ranks), then all_reduce.
  EXPECT_EQ(r.collectives[0].name, "all_gather");
  EXPECT_EQ(r.collectives[0].bytes, 2 * 4 * 262144);
  EXPECT_NEAR(r.collectives[0].algbw_gbps, 1.048576, 1e-9);  // 2.097 MB in 2 ms
  EXPECT_NEAR(r.collectives[0].busbw_gbps, 0.524288, 1e-9);  // x (n-1)/n
  EXPECT_EQ(r.collectives[1].bytes, 4 * 262144);
  EXPECT_NEAR(r.collectives[1].algbw_gbps, 0.524288, 1e-9);
  EXPECT_NEAR(r.collectives[1].busbw_gbps, 0.524288, 1e-9);  // 2(n-1)/n = 1 on 2 ranks
  EXPECT_EQ(r.collectives_without_metadata, 1);                 // the barrier moves no data
}

TEST(BusFactor, NcclTestsFactors) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("allreduce", 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("all_reduce", 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("_allgather_base", 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("reduce_scatter_tensor", 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("all_to_all", 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("broadcast", 16), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("barrier", 4), -1);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("allreduce", 0), -1);
}

TEST(KernelClass, HtaClasses) {
  EXPECT_TRUE(IsCommunicationKernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)"));
  EXPECT_TRUE(IsCommunicationKernel("ncclDevKernel_AllGather_RING_LL(ncclDevComm*)"));
  EXPECT_FALSE(IsComputationKernel("Memcpy HtoD (Pageable -> Device)"));
  EXPECT_FALSE(IsComputationKernel("Memset (Device)"));
  EXPECT_FALSE(IsComputationKernel("Event Sync"));
  EXPECT_TRUE(IsComputationKernel("void at::native::vectorized_elementwise_kernel<4>"));
}

TEST_F(TraceTest, GzipAndFolder) {
  const std::string text = Doc({Launch(0, 1, 1), Kernel("k", 5, 10, 7, 1)}, "\"distributedInfo\":{\"rank\":1},");
  WriteGz("rank1.json.gz", text);
  Write("rank0.json", Doc({Launch(0, 1, 1), Kernel("k", 5, 20, 7, 1)}, "\"distributedInfo\":{\"rank\":0},"));
  Write("notes.json", "{\"log_history\": []}");  // not a trace: the folder skips it
  std::vector<std::string> files;
  ASSERT_TRUE(ExpandTracePaths({dir_.string()}, &files).ok());
  ASSERT_EQ(files.size(), 2u);
  std::vector<Trace> traces(2);
  for (size_t i = 0; i < 2; ++i) ASSERT_TRUE(ReadTraceFile(files[i], &traces[i]).ok()) << files[i];
  const TraceReport report = AnalyzeTraces(traces, {});
  ASSERT_EQ(report.ranks.size(), 2u);
  EXPECT_EQ(report.ranks[0].rank, 0);
  EXPECT_DOUBLE_EQ(report.ranks[0].temporal.kernel_us, 20);
  EXPECT_DOUBLE_EQ(report.ranks[1].temporal.kernel_us, 10);
  EXPECT_DOUBLE_EQ(report.compute_skew_pct, 100);
  const auto j = TraceReportToJson(report);
  EXPECT_DOUBLE_EQ(j["ranks"][1]["temporal"]["kernel_us"].get<double>(), 10);
}

TEST_F(TraceTest, BadInputNamesTheFileAndTheProblem) {
  Trace trace;
  Status s = ReadKinetoTrace(Write("bad.json", "{\"traceEvents\": [ {\"ph\":"), &trace);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad.json: not valid JSON"), std::string::npos) << s.message();
  s = ReadKinetoTrace(Write("arr.json", "[1,2]"), &trace);
  EXPECT_NE(s.message().find("first bad: event 1 is not an object"), std::string::npos) << s.message();
  s = ReadKinetoTrace(Write("str.json", "\"x\""), &trace);
  EXPECT_NE(s.message().find("neither a JSON object nor an array"), std::string::npos) << s.message();
  s = ReadKinetoTrace(Write("noev.json", "{\"schemaVersion\":1}"), &trace);
  EXPECT_NE(s.message().find("no \"traceEvents\""), std::string::npos) << s.message();
  s = ReadKinetoTrace(Write("strts.json", Doc({"{\"ph\":\"X\",\"name\":\"a\",\"ts\":\"x\",\"dur\":1}"})), &trace);
  EXPECT_NE(s.message().find("no numeric \"ts\""), std::string::npos) << s.message();
  // A cut gzip file.
  const std::string gz = WriteGz("cut.json.gz", Doc({Launch(0, 1, 1), Kernel("k", 5, 10, 7, 1)}));
  fs::resize_file(gz, fs::file_size(gz) / 2);
  s = ReadKinetoTrace(gz, &trace);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cut.json.gz: gzip"), std::string::npos) << s.message();
  s = ReadKinetoTrace((dir_ / "missing.json").string(), &trace);
  EXPECT_TRUE(s.IsNotFound());
  // One bad event among good ones: skipped and counted.
  size_t skipped = 0;
  s = ReadKinetoTrace(Write("mixed.json", Doc({Kernel("k", 0, 1, 7, 1), "{\"ph\":\"X\",\"name\":\"a\",\"ts\":1}"})), &trace,
                      &skipped);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(skipped, 1u);
}

// Debian's torch 1.13 (no Kineto) exports a bare array of events without categories.
TEST_F(TraceTest, LegacyArrayFormat) {
  const std::string path = Write("legacy.json",
                                 "[{\"name\": \"ProfilerStep#5\", \"ph\": \"X\", \"ts\": 0, \"dur\": 100, \"tid\": 1, "
                                 "\"pid\": \"CPU functions\", \"args\": {}},"
                                 "{\"name\": \"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__\", \"ph\": \"X\", "
                                 "\"ts\": 1, \"dur\": 40, \"tid\": 1, \"pid\": \"CPU functions\", \"args\": {}},"
                                 "{\"name\": \"aten::mm\", \"ph\": \"X\", \"ts\": 50, \"dur\": 30, \"tid\": 1, "
                                 "\"pid\": \"CPU functions\", \"args\": {}}]");
  Trace trace;
  ASSERT_TRUE(ReadTraceFile(path, &trace).ok());
  const RankTraceReport r = AnalyzeRank(trace, {});
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_DOUBLE_EQ(r.dataloader_share, 0.4);
  ASSERT_EQ(r.top_cpu_ops.size(), 1u);  // the step and the loader are annotations, not operators
  EXPECT_EQ(r.top_cpu_ops[0].name, "aten::mm");
  EXPECT_TRUE(LooksLikeKinetoTrace("[{\"name\": \"aten::mm\", \"ph\": \"X\", \"ts\": 50"));
}

TEST(Sniff, KinetoMarks) {
  EXPECT_TRUE(LooksLikeKinetoTrace("{\"schemaVersion\": 1, \"traceEvents\": ["));
  EXPECT_TRUE(LooksLikeKinetoTrace("{\"distributedInfo\": {\"rank\": 1}, \"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\""));
  EXPECT_FALSE(LooksLikeKinetoTrace("{\"log_history\": [{\"loss\": 1}]}"));
}

}  // namespace
}  // namespace trainscope::perf
