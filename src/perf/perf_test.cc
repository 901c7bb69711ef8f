#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "perf/cpu_peak.h"
#include "perf/peak_table.h"
#include "perf/perf_metrics.h"

namespace trainscope::perf {
namespace {

// --- the peak table ----------------------------------------------------------------------

TEST(PeakTable, BuiltinHasEveryDeviceOfTheIssueWithSources) {
  const PeakTable& table = PeakTable::Builtin();
  for (const char* id : {"v100-sxm2", "a100-sxm", "a100-pcie", "h100-sxm", "h100-pcie", "h200-sxm", "b200", "l4", "t4",
                         "a10", "rtx-4090", "mi250x", "mi300x"}) {
    const DevicePeak* device = table.FindById(id);
    ASSERT_NE(device, nullptr) << id;
    EXPECT_FALSE(device->source.empty()) << id;
    EXPECT_EQ(device->url.rfind("https://", 0), 0u) << id;
    EXPECT_TRUE(device->PeakFlops("fp32").has_value()) << id;
  }
}

TEST(PeakTable, TorchDeviceNamesFindTheirRow) {
  const PeakTable& table = PeakTable::Builtin();
  auto id_of = [&](const char* name) -> std::string {
    const DevicePeak* d = table.Find(name);
    return d ? d->id : "";
  };
  EXPECT_EQ(id_of("NVIDIA H100 80GB HBM3"), "h100-sxm");
  EXPECT_EQ(id_of("NVIDIA H100 PCIe"), "h100-pcie");
  EXPECT_EQ(id_of("NVIDIA H200"), "h200-sxm");
  EXPECT_EQ(id_of("NVIDIA A100-SXM4-80GB"), "a100-sxm");
  EXPECT_EQ(id_of("NVIDIA A100-PCIE-40GB"), "a100-pcie");
  EXPECT_EQ(id_of("Tesla V100-SXM2-16GB"), "v100-sxm2");
  EXPECT_EQ(id_of("Tesla T4"), "t4");
  EXPECT_EQ(id_of("NVIDIA L4"), "l4");
  EXPECT_EQ(id_of("NVIDIA A10"), "a10");
  EXPECT_EQ(id_of("NVIDIA GeForce RTX 4090"), "rtx-4090");
  EXPECT_EQ(id_of("AMD Instinct MI300X"), "mi300x");
  EXPECT_EQ(id_of("NVIDIA B200"), "b200");
  // Other parts whose names contain a known one: unknown, so no MFU against a wrong peak.
  for (const char* other : {"NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA L40S", "NVIDIA A10G", "Tesla V100S-PCIE-32GB",
                            "AMD Instinct MI250X/MI250", "NVIDIA GeForce RTX 4090 D", "NVIDIA GB200", "cpu", ""}) {
    EXPECT_EQ(id_of(other), "") << other;
  }
}

TEST(PeakTable, DensePeaksPerPrecision) {
  const DevicePeak* h100 = PeakTable::Builtin().FindById("h100-sxm");
  ASSERT_NE(h100, nullptr);
  EXPECT_DOUBLE_EQ(*h100->PeakFlops("torch.bfloat16"), 989.5e12);  // 1,979 with sparsity, halved
  EXPECT_DOUBLE_EQ(*h100->PeakFlops("fp8"), 1979e12);
  EXPECT_DOUBLE_EQ(*h100->PeakFlops("float32"), 67e12);
  const DevicePeak* t4 = PeakTable::Builtin().FindById("t4");
  EXPECT_FALSE(t4->PeakFlops("bf16").has_value());  // no BF16 path on Turing: no MFU
  EXPECT_FALSE(t4->PeakFlops("int4").has_value());
}

TEST(PeakTable, BadFilesAreRefusedWithTheirPlace) {
  PeakTable table;
  Status s = PeakTable::Parse("{\"devices\": [{\"id\": \"x\", \"name\": \"X\", \"source\": \"s\", \"url\": \"u\", "
                              "\"names\": [\"x\"], \"peaks\": {\"fp12\": 1}}]}",
                              "mine.json", &table);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("mine.json: devices[0] (x): unknown precision \"fp12\""), std::string::npos) << s.message();
  s = PeakTable::Parse("{\"devices\": [{\"id\": \"x\", \"name\": \"X\", \"source\": \"s\", \"url\": \"u\", "
                       "\"names\": [\"x\"], \"peaks\": {\"fp32\": -3}}]}",
                       "mine.json", &table);
  EXPECT_NE(s.message().find("peaks.fp32 must be a positive number"), std::string::npos) << s.message();
  EXPECT_FALSE(PeakTable::Parse("[1, 2", "mine.json", &table).ok());
  EXPECT_NE(PeakTable::Parse("{}", "mine.json", &table).message().find("\"devices\""), std::string::npos);
}

// --- the CPU peak ------------------------------------------------------------------------

std::string CpuInfoText(const std::string& vendor, int family, int model, const std::string& name, const std::string& mhz,
                        const std::string& flags, int cores, int threads_per_core) {
  std::string text;
  for (int c = 0; c < cores; ++c) {
    for (int t = 0; t < threads_per_core; ++t) {
      text += "processor\t: " + std::to_string(c * threads_per_core + t) + "\nvendor_id\t: " + vendor +
              "\ncpu family\t: " + std::to_string(family) + "\nmodel\t\t: " + std::to_string(model) +
              "\nmodel name\t: " + name + "\ncpu MHz\t\t: " + mhz + "\nphysical id\t: 0\nsiblings\t: " +
              std::to_string(cores * threads_per_core) + "\ncore id\t\t: " + std::to_string(c) +
              "\ncpu cores\t: " + std::to_string(cores) + "\nflags\t\t: " + flags + "\n\n";
    }
  }
  return text;
}

TEST(CpuPeak, Zen5ServerFromTheCurrentClock) {
  // This VM's /proc/cpuinfo: AMD family 26 (Zen 5), no GHz in the name, 2 cores.
  const CpuInfo cpu = ParseCpuInfo(CpuInfoText("AuthenticAMD", 26, 2, "AMD EPYC", "2596.096",
                                               "fpu sse2 avx fma avx2 avx512f avx512_bf16", 2, 1));
  EXPECT_EQ(cpu.logical_cpus, 2);
  EXPECT_EQ(cpu.physical_cores, 2);
  const CpuPeak peak = ComputeCpuPeak(cpu);
  ASSERT_TRUE(peak.known);
  EXPECT_EQ(peak.fp32_flops_per_cycle, 64);
  EXPECT_DOUBLE_EQ(peak.fp32_flops, 2 * 2.596096e9 * 64);
  EXPECT_DOUBLE_EQ(peak.fp64_flops, peak.fp32_flops / 2);
  EXPECT_NE(peak.basis.find("cpu MHz"), std::string::npos);
}

TEST(CpuPeak, IntelNameClockSmtAndThreads) {
  const CpuInfo cpu = ParseCpuInfo(CpuInfoText("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz",
                                               "3100.000", "sse2 avx fma avx2 avx512f", 4, 2));
  EXPECT_EQ(cpu.logical_cpus, 8);
  EXPECT_EQ(cpu.physical_cores, 4);  // hyper-threads share a core's FMA units
  CpuPeak peak = ComputeCpuPeak(cpu);
  EXPECT_DOUBLE_EQ(peak.fp32_flops, 4 * 2.5e9 * 64);  // the name's base clock, not the current 3.1 GHz
  peak = ComputeCpuPeak(cpu, /*threads=*/1);
  EXPECT_DOUBLE_EQ(peak.fp32_flops, 1 * 2.5e9 * 64);
  EXPECT_EQ(ComputeCpuPeak(cpu, 16).cores, 4);
}

TEST(CpuPeak, SameFlagsDifferentUnits) {
  const CpuInfo zen4 = ParseCpuInfo(CpuInfoText("AuthenticAMD", 25, 17, "AMD EPYC 9654 96-Core Processor", "2400.000",
                                                "sse2 avx fma avx2 avx512f", 2, 1));
  EXPECT_EQ(ComputeCpuPeak(zen4).fp32_flops_per_cycle, 32);  // AVX-512 on 256-bit units
  const CpuInfo zen1 = ParseCpuInfo(CpuInfoText("AuthenticAMD", 23, 1, "AMD EPYC 7601 32-Core Processor", "2200.000",
                                                "sse2 avx fma avx2", 2, 1));
  EXPECT_EQ(ComputeCpuPeak(zen1).fp32_flops_per_cycle, 16);
  const CpuInfo haswell = ParseCpuInfo(CpuInfoText("GenuineIntel", 6, 63, "Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz",
                                                   "2500.000", "sse2 avx fma avx2", 2, 1));
  EXPECT_EQ(ComputeCpuPeak(haswell).fp32_flops_per_cycle, 32);
}

TEST(CpuPeak, UnknownHardwareHasNoPeak) {
  const CpuInfo arm = ParseCpuInfo("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\n");
  const CpuPeak peak = ComputeCpuPeak(arm);
  EXPECT_FALSE(peak.known);
  EXPECT_FALSE(peak.reason.empty());
  EXPECT_EQ(peak.fp32_flops, 0);
  EXPECT_FALSE(ComputeCpuPeak(ParseCpuInfo("")).known);
}

TEST(CpuPeak, ThisMachineReadsProcCpuinfo) {
  const CpuInfo cpu = ReadCpuInfo();
  EXPECT_GT(cpu.logical_cpus, 0);
}

// --- bus bandwidth, scaling --------------------------------------------------------------

TEST(BusBandwidth, NcclTestsFactors) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("all_reduce", 4), 2.0 * 3 / 4);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("all_reduce", 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("all_gather", 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("reduce_scatter", 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("all_to_all", 2), 0.5);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("broadcast", 4), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("all_reduce", 1), 0.0);
  EXPECT_TRUE(std::isnan(BusBandwidthFactor("gossip", 4)));
}

TEST(Scaling, Efficiency) {
  EXPECT_DOUBLE_EQ(ScalingEfficiency(100, 360, 4), 0.9);
  EXPECT_TRUE(std::isnan(ScalingEfficiency(0, 360, 4)));
}

// A rank's recorded run: time/step and time/data per step, the perf meta.
RunData Rank(int rank, double step_seconds, double data_seconds, int steps = 10) {
  RunData data;
  data.OnMeta("rank", std::to_string(rank));
  data.OnMeta("perf/flops_per_step", "1e9");
  data.OnMeta("perf/samples_per_step", "32");
  data.OnMeta("perf/precision", "fp32");
  for (int s = 0; s < steps; ++s) {
    const double seconds = s == 0 ? 5 * step_seconds : step_seconds;  // a slow first step is left out
    data.OnScalar("time/step", s, s, seconds);
    data.OnScalar("time/data", s, s, data_seconds);
    data.OnScalar("time/forward", s, s, (seconds - data_seconds) / 3);
    data.OnScalar("time/backward", s, s, (seconds - data_seconds) / 3);
    data.OnScalar("time/other", s, s, (seconds - data_seconds) / 3);
  }
  return data;
}

TEST(AnalyzeRun, ThroughputMfuAndLowMfuReasons) {
  const RunData r0 = Rank(0, 0.1, 0.05), r1 = Rank(1, 0.2, 0.12);
  const RunPerf perf = AnalyzeRun({&r0, &r1}, PeakChoice{1e11, "test peak"});
  EXPECT_EQ(perf.world_size, 2);
  EXPECT_DOUBLE_EQ(perf.step_seconds, 0.2);            // the slowest rank sets the step
  EXPECT_DOUBLE_EQ(perf.samples_per_second, 64 / 0.2);  // n x batch / step time
  EXPECT_DOUBLE_EQ(perf.flops_per_second, 1e9 / 0.2);
  EXPECT_DOUBLE_EQ(perf.mfu, 1e9 / 0.2 / 1e11);
  ASSERT_EQ(perf.findings.size(), 1u);
  const Finding& f = perf.findings[0];
  EXPECT_EQ(f.code, "LOW_MFU");
  ASSERT_FALSE(f.causes.empty());
  EXPECT_EQ(f.causes[0].id, "slow_dataloader");  // data: (0.5 + 0.6) / 2 of the step, the largest share
  EXPECT_NE(f.summary.find("waiting for data"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("MFU 5.0 %"), std::string::npos) << f.summary;
}

TEST(ChoosePeak, AMeasuredGemmAboveTheComputedCpuPeakIsTheCeiling) {
  const CpuPeak cpu = ThisMachineCpuPeak(1);
  if (!cpu.known) GTEST_SKIP() << "no computed CPU peak here: " << cpu.reason;
  RunData data = Rank(0, 0.1, 0.0);
  data.OnMeta("perf/device", "cpu");
  data.OnMeta("perf/threads", "1");
  data.OnMeta("perf/measured_peak_flops", fmt::format("{}", 0.5 * cpu.fp32_flops));
  PeakChoice below = ChoosePeak(data, "");
  ASSERT_TRUE(below.flops.has_value());
  EXPECT_DOUBLE_EQ(*below.flops, cpu.fp32_flops);  // a slower GEMM leaves the computed peak
  EXPECT_EQ(below.source.rfind("computed CPU peak", 0), 0u) << below.source;

  data.OnMeta("perf/measured_peak_flops", fmt::format("{}", 1.25 * cpu.fp32_flops));
  PeakChoice above = ChoosePeak(data, "");
  ASSERT_TRUE(above.flops.has_value());
  EXPECT_DOUBLE_EQ(*above.flops, 1.25 * cpu.fp32_flops);
  EXPECT_NE(above.source.find("1.25x the computed CPU peak"), std::string::npos) << above.source;
  const RunPerf perf = AnalyzeRun({&data}, above);
  EXPECT_DOUBLE_EQ(perf.mfu, 1e9 / 0.1 / (1.25 * cpu.fp32_flops));

  data.OnMeta("perf/precision", "fp64");  // a float32 GEMM says nothing of the fp64 peak
  EXPECT_DOUBLE_EQ(*ChoosePeak(data, "").flops, cpu.fp64_flops);
}

TEST(AnalyzeRun, NoPeakNoMfuAndNoFinding) {
  const RunData r0 = Rank(0, 0.1, 0.05);
  const RunPerf perf = AnalyzeRun({&r0}, PeakChoice{std::nullopt, "unknown device"});
  EXPECT_TRUE(std::isnan(perf.mfu));
  EXPECT_DOUBLE_EQ(perf.samples_per_second, 320);
  EXPECT_TRUE(perf.findings.empty());
}

TEST(AnalyzeRun, HighMfuIsNoFinding) {
  const RunData r0 = Rank(0, 0.1, 0.0);
  const RunPerf perf = AnalyzeRun({&r0}, PeakChoice{1e10 / 0.5, "test"});  // 1e10 FLOP/s achieved of 2e10: 50 %
  EXPECT_DOUBLE_EQ(perf.mfu, 0.5);
  EXPECT_TRUE(perf.findings.empty());
}

TEST(CompareScaling, PoorScalingBelowTheThreshold) {
  const RunData one = Rank(0, 0.1, 0.0);
  const RunData a = Rank(0, 0.15, 0.0), b = Rank(1, 0.15, 0.0);
  const RunPerf run_1 = AnalyzeRun({&one}, {});
  const RunPerf run_2 = AnalyzeRun({&a, &b}, {});
  const ScalingPerf scaling = CompareScaling(run_1, run_2);
  EXPECT_DOUBLE_EQ(scaling.efficiency, (64 / 0.15) / (2 * 320.0));  // 0.667
  ASSERT_EQ(scaling.findings.size(), 1u);
  EXPECT_EQ(scaling.findings[0].code, "POOR_SCALING");
  const RunData c = Rank(0, 0.11, 0.0), d = Rank(1, 0.11, 0.0);
  EXPECT_TRUE(CompareScaling(run_1, AnalyzeRun({&c, &d}, {})).findings.empty());  // 91 %
}

}  // namespace
}  // namespace trainscope::perf
