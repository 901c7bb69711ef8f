#include "perf/cpu_peak.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <utility>

namespace trainscope::perf {

namespace {

std::string Trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return "";
  const auto last = text.find_last_not_of(" \t\r");
  return std::string(text.substr(first, last - first + 1));
}

int ToInt(const std::string& text) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 0);
  return end == text.c_str() ? -1 : static_cast<int>(value);
}

std::string ReadFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

CpuInfo ParseCpuInfo(std::string_view text) {
  CpuInfo cpu;
  std::set<std::pair<std::string, std::string>> cores;  // (physical id, core id)
  std::string physical_id;
  bool first = true;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = Trim(std::string_view(line).substr(0, colon));
    const std::string value = Trim(std::string_view(line).substr(colon + 1));
    if (key == "processor") {
      if (cpu.logical_cpus > 0) first = false;
      ++cpu.logical_cpus;
    } else if (key == "physical id") {
      physical_id = value;
    } else if (key == "core id") {
      cores.insert({physical_id, value});
    } else if (!first) {
      continue;  // the rest is the same on every processor: read it once
    } else if (key == "vendor_id") {
      cpu.vendor = value;
    } else if (key == "model name") {
      cpu.model_name = value;
    } else if (key == "cpu family") {
      cpu.family = ToInt(value);
    } else if (key == "model") {
      cpu.model = ToInt(value);
    } else if (key == "cpu MHz") {
      cpu.mhz = std::atof(value.c_str());
    } else if (key == "flags") {
      std::istringstream words(value);
      std::string flag;
      while (words >> flag) cpu.flags.insert(flag);
    }
  }
  cpu.physical_cores = cores.empty() ? cpu.logical_cpus : static_cast<int>(cores.size());
  return cpu;
}

CpuInfo ReadCpuInfo() {
  std::ifstream in("/proc/cpuinfo");
  std::stringstream text;
  text << in.rdbuf();
  return ParseCpuInfo(text.str());
}

CpuPeak ComputeCpuPeak(const CpuInfo& cpu, int threads, double base_ghz_override) {
  CpuPeak peak;
  if (cpu.logical_cpus == 0) {
    peak.reason = "no /proc/cpuinfo to read";
    return peak;
  }
  const bool amd = cpu.vendor == "AuthenticAMD";
  const bool intel = cpu.vendor == "GenuineIntel";
  const auto has = [&](const char* flag) { return cpu.flags.count(flag) > 0; };
  // FP32 FLOPs per cycle per core = lanes x FMA units x 2.
  std::string assumption;
  if (!amd && !intel) {
    peak.reason = fmt::format("vendor '{}' is not one whose vector units trainscope knows (x86 Intel/AMD)", cpu.vendor);
    return peak;
  }
  if (has("avx512f") && has("fma")) {
    if (amd && cpu.family == 0x19) {
      peak.isa = "avx512f+fma on 256-bit units (AMD Zen 4), 2 FMA pipes";
      peak.fp32_flops_per_cycle = 32;
    } else {
      peak.isa = "avx512f+fma (512-bit), 2 FMA units";
      peak.fp32_flops_per_cycle = 64;
      assumption = amd ? "assumed the server Zen 5 datapath (512-bit; mobile parts have 256-bit)"
                       : "assumed 2 AVX-512 FMA units per core (Xeon Gold/Platinum; some Silver/Bronze parts have 1)";
    }
  } else if (has("avx2") && has("fma")) {
    if (amd && cpu.family == 0x17 && cpu.model < 0x30) {
      peak.isa = "avx2+fma on 128-bit units (AMD Zen 1), 2 FMA pipes";
      peak.fp32_flops_per_cycle = 16;
    } else {
      peak.isa = "avx2+fma (256-bit), 2 FMA units";
      peak.fp32_flops_per_cycle = 32;
    }
  } else if (has("avx")) {
    peak.isa = "avx (256-bit), one add and one multiply unit, no FMA";
    peak.fp32_flops_per_cycle = 16;
  } else if (has("sse2")) {
    peak.isa = "sse2 (128-bit), one add and one multiply unit";
    peak.fp32_flops_per_cycle = 8;
  } else {
    peak.reason = "no SSE2/AVX/AVX-512 flags in /proc/cpuinfo";
    return peak;
  }
  // The clock: a base frequency the kernel states, else the one in the model name, else the
  // current clock /proc/cpuinfo shows (on a VM, usually the host's nominal clock).
  static const std::regex kGhzInName(R"(@\s*([0-9]+(\.[0-9]+)?)\s*GHz)", std::regex::icase);
  std::smatch match;
  if (base_ghz_override > 0) {
    peak.ghz = base_ghz_override;
    peak.clock_source = "cpufreq base_frequency";
  } else if (std::regex_search(cpu.model_name, match, kGhzInName)) {
    peak.ghz = std::atof(match[1].str().c_str());
    peak.clock_source = "the model name";
  } else if (cpu.mhz > 0) {
    peak.ghz = cpu.mhz / 1000.0;
    peak.clock_source = "cpu MHz in /proc/cpuinfo (the clock when read)";
  } else {
    peak.reason = "no clock frequency found (model name, cpufreq, cpu MHz)";
    return peak;
  }
  const int physical = cpu.physical_cores > 0 ? cpu.physical_cores : cpu.logical_cpus;
  peak.cores = threads > 0 && threads < physical ? threads : physical;
  peak.fp32_flops = peak.cores * peak.ghz * 1e9 * peak.fp32_flops_per_cycle;
  peak.fp64_flops = peak.fp32_flops / 2;
  peak.known = true;
  peak.basis = fmt::format("{} cores x {:.3f} GHz ({}) x {} FP32 FLOPs/cycle ({}); FP64 half of it{}", peak.cores,
                           peak.ghz, peak.clock_source, peak.fp32_flops_per_cycle, peak.isa,
                           assumption.empty() ? "" : "; " + assumption);
  return peak;
}

CpuPeak ThisMachineCpuPeak(int threads) {
  const std::string base = ReadFirstLine("/sys/devices/system/cpu/cpu0/cpufreq/base_frequency");  // kHz
  const double base_ghz = base.empty() ? 0 : std::atof(base.c_str()) / 1e6;
  return ComputeCpuPeak(ReadCpuInfo(), threads, base_ghz);
}

}  // namespace trainscope::perf
