// This machine's CPU peak FLOP/s, computed from what /proc/cpuinfo says: physical cores x
// clock x FLOPs per cycle per core (vector width x FMA units x 2 for a fused multiply-add).
//
// The FLOPs per cycle come from the instruction set flags and, where one vendor builds the
// same flags two ways, the CPU family (AMD Zen 4 runs AVX-512 on 256-bit units, Zen 5 on
// 512-bit ones). What /proc/cpuinfo cannot say (one or two AVX-512 FMA units on an Intel
// Xeon; a laptop Zen 5's halved datapath) is assumed as the server part and said in `basis`.
// An instruction set this does not know (not x86) gives known = false: no peak, no MFU.
#pragma once

#include <set>
#include <string>
#include <string_view>

namespace trainscope::perf {

struct CpuInfo {
  std::string vendor;      // "GenuineIntel", "AuthenticAMD"
  std::string model_name;  // "AMD EPYC 9654 96-Core Processor"
  int family = -1;
  int model = -1;
  int logical_cpus = 0;    // "processor" entries
  int physical_cores = 0;  // distinct (physical id, core id); logical_cpus when absent
  double mhz = 0;          // "cpu MHz" of the first processor (the current clock)
  std::set<std::string> flags;
};

// Parses /proc/cpuinfo's text.
CpuInfo ParseCpuInfo(std::string_view text);
// Reads /proc/cpuinfo (empty CpuInfo when unreadable).
CpuInfo ReadCpuInfo();

struct CpuPeak {
  bool known = false;
  std::string reason;        // why not, when !known
  int cores = 0;             // physical cores counted
  double ghz = 0;
  std::string clock_source;  // "model name (@ 2.50GHz)", "cpufreq base_frequency", "cpu MHz (current clock)"
  std::string isa;           // "avx512f+fma (512-bit, 2 FMA units)", ...
  int fp32_flops_per_cycle = 0;  // per core
  double fp32_flops = 0;     // per second, all counted cores
  double fp64_flops = 0;
  std::string basis;         // the arithmetic and its assumptions, in words
};

// threads: the cores the training uses (torch.get_num_threads()); 0 or more than the
// physical cores: all physical cores (SMT siblings share one core's FMA units).
// base_ghz_override: a clock from sysfs (cpufreq base_frequency), 0 when absent.
CpuPeak ComputeCpuPeak(const CpuInfo& cpu, int threads = 0, double base_ghz_override = 0);
// ComputeCpuPeak(ReadCpuInfo(), threads, this machine's cpufreq base frequency if any).
CpuPeak ThisMachineCpuPeak(int threads = 0);

}  // namespace trainscope::perf
