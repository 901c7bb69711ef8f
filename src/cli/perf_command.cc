// `trainscope perf peak | run | scaling | collectives`: the hardware's peak, a run's throughput
// and MFU, scaling efficiency between two runs, collective bandwidth (docs/perf.md).
//
// What needs torch (the measured GEMM peak, the collectives) runs in the Python package as
// `python -m trainscope.perf ...` (the interpreter `demo` uses, or TRAINSCOPE_PYTHON); what
// only reads (the table, the computed CPU peak, recorded runs) is here.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/rank_groups.h"
#include "cli/source.h"
#include "core/tag.h"
#include "perf/cpu_peak.h"
#include "perf/peak_table.h"
#include "perf/perf_metrics.h"
#include "store/json_forms.h"

#ifndef TRAINSCOPE_PYTHON_EXECUTABLE
#define TRAINSCOPE_PYTHON_EXECUTABLE "python3"
#endif

namespace trainscope::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json Number(double value) { return std::isfinite(value) ? json(value) : json(nullptr); }

std::string Rate(double flops) {
  if (!std::isfinite(flops)) return "-";
  if (flops >= 1e12) return fmt::format("{:.1f} TFLOP/s", flops / 1e12);
  return fmt::format("{:.1f} GFLOP/s", flops / 1e9);
}

std::string Pct(double fraction) { return std::isfinite(fraction) ? fmt::format("{:.2f} %", 100 * fraction) : "-"; }

// Runs `python -m trainscope.perf ARGS...` with `env` added, its stdout into *out. Returns ""
// or what failed.
std::string RunPerfModule(const std::vector<std::string>& args, std::string* out,
                          const std::vector<std::pair<std::string, std::string>>& env = {}) {
  const fs::path package_dir = fs::path(ExecutableDir()) / "python";
  if (fs::exists(package_dir / "trainscope" / "perf.py")) {
    const char* old = std::getenv("PYTHONPATH");
    const std::string path = package_dir.string() + (old && *old ? std::string(":") + old : "");
    setenv("PYTHONPATH", path.c_str(), 1);
  }
  const char* env_python = std::getenv("TRAINSCOPE_PYTHON");
  const std::string python = env_python && *env_python ? env_python : TRAINSCOPE_PYTHON_EXECUTABLE;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return std::string("pipe: ") + std::strerror(errno);
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    std::vector<std::string> argv_text = {python, "-m", "trainscope.perf"};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(python.c_str(), argv.data());
    fmt::print(stderr, "trainscope perf: cannot run {}: {}\n", python, std::strerror(errno));
    _exit(127);
  }
  close(pipe_fds[1]);
  char buffer[4096];
  ssize_t n;
  while ((n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0) out->append(buffer, static_cast<size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return fmt::format("{} -m trainscope.perf {} failed (set TRAINSCOPE_PYTHON to a python3 with torch)", python,
                       fmt::join(args, " "));
  }
  return "";
}

// --- perf peak -----------------------------------------------------------------------------

json CpuPeakJson(const perf::CpuPeak& peak) {
  json out = {{"known", peak.known}};
  if (!peak.known) {
    out["reason"] = peak.reason;
    return out;
  }
  out.update({{"fp32_flops", peak.fp32_flops}, {"fp64_flops", peak.fp64_flops}, {"cores", peak.cores},
              {"ghz", peak.ghz}, {"clock_source", peak.clock_source}, {"isa", peak.isa},
              {"fp32_flops_per_cycle", peak.fp32_flops_per_cycle}, {"basis", peak.basis}});
  return out;
}

int PeakCommand(bool as_json, bool measure, int threads) {
  const perf::PeakTable& table = perf::PeakTable::Builtin();
  const perf::CpuInfo cpu = perf::ReadCpuInfo();
  const perf::CpuPeak computed = perf::ThisMachineCpuPeak(0);
  json measured = nullptr;
  if (measure) {
    std::string text;
    std::vector<std::string> args = {"measure-peak"};
    std::vector<std::pair<std::string, std::string>> env;
    if (threads > 0) {
      args.insert(args.end(), {"--threads", std::to_string(threads)});
      // torch.set_num_threads does not reach the BLAS's own pool (Debian's torch on OpenBLAS
      // multiplied on every core with it at 1): the pools are sized before the BLAS loads.
      for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}) {
        env.emplace_back(name, std::to_string(threads));
      }
    }
    const std::string error = RunPerfModule(args, &text, env);
    json parsed = error.empty() ? json::parse(text, nullptr, false) : json();
    if (!error.empty() || parsed.is_discarded() || !parsed.is_object()) {
      measured = {{"error", error.empty() ? "the measurement printed no JSON object" : error}};
    } else {
      measured = parsed;
      // Against the computed peak of the cores the benchmark used.
      const perf::CpuPeak same_cores = perf::ThisMachineCpuPeak(parsed.value("threads", 0));
      if (same_cores.known) {
        measured["computed_fp32_flops_same_cores"] = same_cores.fp32_flops;
        measured["fraction_of_computed"] = parsed.value("flops", 0.0) / same_cores.fp32_flops;
      }
    }
  }
  if (as_json) {
    json devices = json::array();
    for (const auto& d : table.devices()) {
      json peaks = json::object();
      for (auto precision : perf::kPrecisions) {
        const auto found = d.tflops.find(std::string(precision));
        peaks[std::string(precision)] = found == d.tflops.end() ? json(nullptr) : json(found->second);
      }
      devices.push_back({{"id", d.id}, {"name", d.name}, {"tflops", peaks}, {"source", d.source}, {"url", d.url}});
    }
    json flags = json::array();
    for (const char* flag : {"sse2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"}) {
      if (cpu.flags.count(flag)) flags.push_back(flag);
    }
    json out = {{"units", "TFLOP/s, dense (no 2:4 sparsity); cpu in FLOP/s"},
                {"devices", devices},
                {"cpu", {{"model_name", cpu.model_name}, {"vendor", cpu.vendor}, {"family", cpu.family},
                         {"model", cpu.model}, {"logical_cpus", cpu.logical_cpus},
                         {"physical_cores", cpu.physical_cores}, {"vector_flags", flags},
                         {"computed", CpuPeakJson(computed)}, {"measured", measured}}}};
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("Dense peak per precision, TFLOP/s (no 2:4 sparsity; '-': no such path or no published figure)\n");
  fmt::print("{:<26}", "device");
  for (auto precision : perf::kPrecisions) fmt::print(" {:>8}", precision);
  fmt::print("\n");
  for (const auto& d : table.devices()) {
    fmt::print("{:<26}", d.name);
    for (auto precision : perf::kPrecisions) {
      const auto found = d.tflops.find(std::string(precision));
      fmt::print(" {:>8}", found == d.tflops.end() ? std::string("-") : fmt::format("{:g}", found->second));
    }
    fmt::print("\n");
  }
  fmt::print("\nThis machine's CPU: {} ({} logical CPUs, {} physical cores)\n",
             cpu.model_name.empty() ? "unknown" : cpu.model_name, cpu.logical_cpus, cpu.physical_cores);
  if (computed.known) {
    fmt::print("  computed: FP32 {}, FP64 {}\n            {}\n", Rate(computed.fp32_flops), Rate(computed.fp64_flops),
               computed.basis);
  } else {
    fmt::print("  computed: unknown ({}): no CPU MFU\n", computed.reason);
  }
  if (measure) {
    if (measured.contains("error")) {
      fmt::print("  measured: unavailable ({})\n", measured["error"].get<std::string>());
    } else {
      fmt::print("  measured: {} {} ({}, {} thread{}){}\n", measured.value("dtype", ""), Rate(measured.value("flops", 0.0)),
                 measured.value("method", ""), measured.value("threads", 0), measured.value("threads", 0) == 1 ? "" : "s",
                 measured.contains("fraction_of_computed")
                     ? fmt::format(": {} of the computed peak of {} core(s)", Pct(measured["fraction_of_computed"]),
                                   measured.value("threads", 0))
                     : "");
    }
  }
  fmt::print("\nSources (data/peaks.json):\n");
  for (const auto& d : table.devices()) fmt::print("  {}: {} <{}>\n", d.name, d.source, d.url);
  return 0;
}

// --- perf run / scaling ----------------------------------------------------------------------

struct LoadedRunGroup {
  std::vector<LoadedRun> runs;
  std::vector<const RunData*> ranks;  // by rank
  std::string dir;
};

Status LoadRunGroup(const std::string& path, LoadedRunGroup* out) {
  bool is_logdir = false;
  if (Status s = LoadSources(path, &out->runs, &is_logdir); !s.ok()) return s;
  std::vector<std::string> dirs;
  for (const auto& run : out->runs) dirs.push_back(run.source);
  const auto groups = GroupByRun(dirs);
  if (groups.size() != 1) {
    return Status::InvalidArgument(fmt::format("{}: holds {} runs; give one run directory (a data-parallel run's "
                                               "directory holds its rank-<r>/ stores)", path, groups.size()));
  }
  out->dir = groups[0].dir;
  for (size_t index : groups[0].members) out->ranks.push_back(&out->runs[index].data);
  return Status::Ok();
}

std::string HostName() {
  char name[256] = {};
  return gethostname(name, sizeof(name) - 1) == 0 ? name : "";
}

perf::PeakChoice ChoosePeak(const RunData& data) { return perf::ChoosePeak(data, HostName()); }

json RunPerfJson(const std::string& source, const perf::RunPerf& perf, const RunData& first, bool with_steps) {
  json ranks = json::array();
  for (const auto& r : perf.ranks) {
    ranks.push_back({{"rank", r.rank}, {"median_step_seconds", Number(r.median_step_seconds)}, {"steps", r.steps}});
  }
  json shares = json::object();
  for (const auto& s : perf.shares) shares[s.phase] = Number(s.share);
  json findings = json::array();
  for (const auto& f : perf.findings) findings.push_back(FindingToJson(f));
  const double measured = perf::MetaNumber(first, tags::kPerfMeasuredPeakFlops);
  json out = {{"source", source},
              {"world_size", perf.world_size},
              {"device", perf.device},
              {"precision", perf.precision},
              {"flops_per_step", Number(perf.flops_per_step)},
              {"samples_per_step", Number(perf.samples_per_step)},
              {"tokens_per_step", Number(perf.tokens_per_step)},
              {"peak_flops", perf.peak.flops ? json(*perf.peak.flops) : json(nullptr)},
              {"peak_source", perf.peak.source},
              {"step_seconds", Number(perf.step_seconds)},
              {"samples_per_second", Number(perf.samples_per_second)},
              {"tokens_per_second", Number(perf.tokens_per_second)},
              {"flops_per_second", Number(perf.flops_per_second)},
              {"mfu", Number(perf.mfu)},
              {"measured_peak_flops", Number(measured)},
              {"mfu_of_measured_peak", Number(measured > 0 ? perf.flops_per_second / measured : perf::kNaN)},
              {"shares", shares},
              {"ranks", ranks},
              {"findings", findings}};
  if (with_steps) {
    json steps = json::array();
    for (const auto& s : perf.steps) {
      steps.push_back({{"step", s.step}, {"seconds", Number(s.seconds)}, {"samples_per_second", Number(s.samples_per_second)},
                       {"tokens_per_second", Number(s.tokens_per_second)}, {"flops_per_second", Number(s.flops_per_second)},
                       {"mfu", Number(s.mfu)}});
    }
    out["steps"] = steps;
  }
  return out;
}

void PrintRunPerf(const json& j) {
  fmt::print("{}: {} rank{}, device {}, precision {}\n", j["source"].get<std::string>(), j["world_size"].get<int>(),
             j["world_size"].get<int>() == 1 ? "" : "s", j["device"].get<std::string>().empty() ? "?" : j["device"].get<std::string>(),
             j["precision"].get<std::string>().empty() ? "?" : j["precision"].get<std::string>());
  auto num = [&](const char* key) { return j[key].is_number() ? j[key].get<double>() : perf::kNaN; };
  fmt::print("  step time (median, after the first): {}\n",
             std::isfinite(num("step_seconds")) ? fmt::format("{:.4g} s", num("step_seconds")) : "- (no time/step recorded)");
  if (std::isfinite(num("samples_per_second"))) fmt::print("  throughput: {:.4g} samples/s\n", num("samples_per_second"));
  if (std::isfinite(num("tokens_per_second"))) fmt::print("  throughput: {:.4g} tokens/s\n", num("tokens_per_second"));
  if (std::isfinite(num("flops_per_step"))) {
    fmt::print("  model FLOPs per step and rank: {:.4g}; achieved {} per device\n", num("flops_per_step"),
               Rate(num("flops_per_second")));
  } else {
    fmt::print("  model FLOPs per step: not recorded (ts.perf.record(run, ts.count_flops(...))): no MFU\n");
  }
  fmt::print("  peak: {} ({})\n", j["peak_flops"].is_number() ? Rate(j["peak_flops"].get<double>()) : "none",
             j["peak_source"].get<std::string>());
  fmt::print("  MFU: {}\n", Pct(num("mfu")));
  if (std::isfinite(num("mfu_of_measured_peak"))) {
    fmt::print("  against the measured peak ({}): {}\n", Rate(num("measured_peak_flops")), Pct(num("mfu_of_measured_peak")));
  }
  if (!j["shares"].empty()) {
    std::string shares;
    for (const auto& [phase, share] : j["shares"].items()) {
      shares += fmt::format("{}{} {}", shares.empty() ? "" : ", ", phase, share.is_number() ? Pct(share.get<double>()) : "-");
    }
    fmt::print("  step shares: {}\n", shares);
  }
  for (const auto& r : j["ranks"]) {
    if (j["world_size"].get<int>() > 1) {
      fmt::print("  rank {}: median step {:.4g} s over {} steps\n", r["rank"].get<int>(),
                 r["median_step_seconds"].is_number() ? r["median_step_seconds"].get<double>() : perf::kNaN,
                 r["steps"].get<int>());
    }
  }
  for (const auto& f : j["findings"]) {
    fmt::print("  {} [{}] {}\n", f["code"].get<std::string>(), f["severity"].get<std::string>(), f["summary"].get<std::string>());
  }
}

int RunCommand(const std::string& path, bool as_json, bool with_steps, double low_mfu) {
  LoadedRunGroup group;
  if (Status s = LoadRunGroup(path, &group); !s.ok()) {
    fmt::print(stderr, "trainscope perf run: {}\n", s.message());
    return 2;
  }
  perf::PerfOptions options;
  options.low_mfu = low_mfu;
  const perf::RunPerf result = perf::AnalyzeRun(group.ranks, ChoosePeak(*group.ranks[0]), options);
  const json j = RunPerfJson(path, result, *group.ranks[0], with_steps);
  if (as_json) {
    fmt::print("{}\n", j.dump(2));
  } else {
    PrintRunPerf(j);
    if (with_steps) {
      fmt::print("  {:>6} {:>10} {:>12} {:>14} {:>8}\n", "step", "seconds", "samples/s", "FLOP/s", "MFU");
      for (const auto& s : result.steps) {
        fmt::print("  {:>6} {:>10.4g} {:>12.4g} {:>14} {:>8}\n", s.step, s.seconds, s.samples_per_second,
                   Rate(s.flops_per_second), Pct(s.mfu));
      }
    }
  }
  return 0;
}

int ScalingCommand(const std::string& path_1, const std::string& path_n, bool as_json, double poor_scaling) {
  LoadedRunGroup one, many;
  for (auto [path, group] : {std::pair{&path_1, &one}, std::pair{&path_n, &many}}) {
    if (Status s = LoadRunGroup(*path, group); !s.ok()) {
      fmt::print(stderr, "trainscope perf scaling: {}\n", s.message());
      return 2;
    }
  }
  perf::PerfOptions options;
  options.poor_scaling = poor_scaling;
  const perf::RunPerf run_1 = perf::AnalyzeRun(one.ranks, ChoosePeak(*one.ranks[0]), options);
  const perf::RunPerf run_n = perf::AnalyzeRun(many.ranks, ChoosePeak(*many.ranks[0]), options);
  const perf::ScalingPerf scaling = perf::CompareScaling(run_1, run_n, options);
  if (!std::isfinite(scaling.throughput_1) || !std::isfinite(scaling.throughput_n)) {
    fmt::print(stderr, "trainscope perf scaling: no throughput for {} (needs time/step and a batch size: "
                       "perf/samples_per_step, perf/tokens_per_step or config batch_size)\n",
               std::isfinite(scaling.throughput_1) ? path_n : path_1);
    return 2;
  }
  json findings = json::array();
  for (const auto& f : scaling.findings) findings.push_back(FindingToJson(f));
  const json j = {{"run_1", RunPerfJson(path_1, run_1, *one.ranks[0], false)},
                  {"run_n", RunPerfJson(path_n, run_n, *many.ranks[0], false)},
                  {"n_1", scaling.n_1}, {"n_n", scaling.n_n}, {"unit", scaling.unit},
                  {"throughput_1", Number(scaling.throughput_1)}, {"throughput_n", Number(scaling.throughput_n)},
                  {"efficiency", Number(scaling.efficiency)}, {"findings", findings}};
  if (as_json) {
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("{} ({} rank{}): {:.4g} {}, step {:.4g} s\n", path_1, scaling.n_1, scaling.n_1 == 1 ? "" : "s",
             scaling.throughput_1, scaling.unit, run_1.step_seconds);
  fmt::print("{} ({} ranks): {:.4g} {}, step {:.4g} s\n", path_n, scaling.n_n, scaling.throughput_n, scaling.unit,
             run_n.step_seconds);
  for (const auto& r : run_n.ranks) fmt::print("  rank {}: median step {:.4g} s\n", r.rank, r.median_step_seconds);
  fmt::print("scaling efficiency = throughput_n / (n x throughput_1) = {:.4g} / ({} x {:.4g}) = {}\n",
             scaling.throughput_n, static_cast<double>(scaling.n_n) / scaling.n_1, scaling.throughput_1,
             Pct(scaling.efficiency));
  for (const auto& f : scaling.findings) fmt::print("{} [{}] {}\n", f.code, SeverityName(f.severity), f.summary);
  return 0;
}

// --- perf collectives --------------------------------------------------------------------------

int CollectivesCommand(int nproc, const std::string& backend, const std::string& sizes, const std::string& ops,
                       bool as_json) {
  if (nproc < 2) {
    fmt::print(stderr, "trainscope perf collectives: --nproc must be at least 2 (got {})\n", nproc);
    return 2;
  }
  std::vector<std::string> args = {"collectives", "--nproc", std::to_string(nproc)};
  if (!backend.empty()) args.insert(args.end(), {"--backend", backend});
  if (!sizes.empty()) args.insert(args.end(), {"--sizes", sizes});
  if (!ops.empty()) args.insert(args.end(), {"--ops", ops});
  std::string text;
  if (std::string error = RunPerfModule(args, &text); !error.empty()) {
    fmt::print(stderr, "trainscope perf collectives: {}\n", error);
    return 2;
  }
  json parsed = json::parse(text, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains("results") || !parsed["results"].is_array()) {
    fmt::print(stderr, "trainscope perf collectives: the benchmark printed no results object:\n{}\n", text);
    return 2;
  }
  const int ranks = parsed.value("ranks", nproc);
  for (auto& r : parsed["results"]) {
    if (!r.value("supported", false)) continue;
    const double seconds = r.value("seconds", 0.0);
    const double bytes = r.value("bytes", 0.0);
    const double algbw = seconds > 0 ? bytes / seconds : perf::kNaN;
    r["algbw_gbps"] = Number(algbw / 1e9);
    r["busbw_gbps"] = Number(algbw * perf::BusBandwidthFactor(r.value("op", ""), ranks) / 1e9);
    r["bus_factor"] = Number(perf::BusBandwidthFactor(r.value("op", ""), ranks));
  }
  if (as_json) {
    fmt::print("{}\n", parsed.dump(2));
    return 0;
  }
  fmt::print("{} ranks, {} backend, torch {} (busbw = algbw x nccl-tests' factor: all_reduce 2(n-1)/n; all_gather, "
             "reduce_scatter, all_to_all (n-1)/n; broadcast 1)\n",
             ranks, parsed.value("backend", "?"), parsed.value("torch", "?"));
  fmt::print("{:<15} {:>10} {:>12} {:>12} {:>12}\n", "collective", "bytes", "time (us)", "algbw GB/s", "busbw GB/s");
  for (const auto& r : parsed["results"]) {
    if (!r.value("supported", false)) {
      fmt::print("{:<15} not supported by {} here: {}\n", r.value("op", ""), parsed.value("backend", "?"),
                 r.value("error", ""));
      continue;
    }
    fmt::print("{:<15} {:>10} {:>12.1f} {:>12.3f} {:>12.3f}\n", r.value("op", ""), r.value("bytes", 0),
               r.value("seconds", 0.0) * 1e6, r["algbw_gbps"].is_number() ? r["algbw_gbps"].get<double>() : perf::kNaN,
               r["busbw_gbps"].is_number() ? r["busbw_gbps"].get<double>() : perf::kNaN);
  }
  return 0;
}

}  // namespace

void AddPerfCommand(CLI::App& app, int* exit_code) {
  auto* perf = app.add_subcommand("perf", "Hardware peak, MFU, throughput, scaling and collective bandwidth.");
  perf->require_subcommand(1);

  auto* peak = perf->add_subcommand("peak", "The dense peak table per precision, and this machine's CPU peak.");
  auto peak_json = std::make_shared<bool>(false);
  auto no_measure = std::make_shared<bool>(false);
  auto threads = std::make_shared<int>(0);
  peak->add_flag("--json", *peak_json, "Print JSON");
  peak->add_flag("--no-measure", *no_measure, "Skip the measured GEMM peak (needs python3 with torch)");
  peak->add_option("--threads", *threads, "Threads for the measured peak (default: torch's)");
  peak->callback([=] { *exit_code = PeakCommand(*peak_json, !*no_measure, *threads); });

  auto* run = perf->add_subcommand("run", "Throughput and MFU of a recorded run (its ranks together), LOW_MFU.");
  auto run_path = std::make_shared<std::string>();
  auto run_json = std::make_shared<bool>(false);
  auto run_steps = std::make_shared<bool>(false);
  auto low_mfu = std::make_shared<double>(perf::PerfOptions{}.low_mfu);
  run->add_option("RUN", *run_path, "Run directory (a data-parallel run's directory holds rank-<r>/)")->required();
  run->add_flag("--json", *run_json, "Print JSON");
  run->add_flag("--steps", *run_steps, "Every step's throughput and MFU");
  run->add_option("--low-mfu", *low_mfu, "LOW_MFU below this MFU (0..1)")->capture_default_str();
  run->callback([=] { *exit_code = RunCommand(*run_path, *run_json, *run_steps, *low_mfu); });

  auto* scaling = perf->add_subcommand("scaling", "Scaling efficiency = throughput_n / (n x throughput_1), POOR_SCALING.");
  auto path_1 = std::make_shared<std::string>();
  auto path_n = std::make_shared<std::string>();
  auto scaling_json = std::make_shared<bool>(false);
  auto poor = std::make_shared<double>(perf::PerfOptions{}.poor_scaling);
  scaling->add_option("RUN_1", *path_1, "The run on fewer devices (usually 1)")->required();
  scaling->add_option("RUN_N", *path_n, "The run on n devices")->required();
  scaling->add_flag("--json", *scaling_json, "Print JSON");
  scaling->add_option("--poor-scaling", *poor, "POOR_SCALING below this efficiency (0..1)")->capture_default_str();
  scaling->callback([=] { *exit_code = ScalingCommand(*path_1, *path_n, *scaling_json, *poor); });

  auto* coll = perf->add_subcommand("collectives", "Time, algbw and busbw of collectives over a size sweep (torch.distributed).");
  auto nproc = std::make_shared<int>(2);
  auto backend = std::make_shared<std::string>();
  auto sizes = std::make_shared<std::string>();
  auto ops = std::make_shared<std::string>();
  auto coll_json = std::make_shared<bool>(false);
  coll->add_option("--nproc", *nproc, "Local processes")->capture_default_str();
  coll->add_option("--backend", *backend, "gloo or nccl (default: nccl with enough GPUs, else gloo)");
  coll->add_option("--sizes", *sizes, "Message sizes in bytes, comma-separated (default 4 KB .. 4 MB)");
  coll->add_option("--ops", *ops, "Collectives, comma-separated (default all_reduce,all_gather,reduce_scatter,broadcast,all_to_all)");
  coll->add_flag("--json", *coll_json, "Print JSON");
  coll->callback([=] { *exit_code = CollectivesCommand(*nproc, *backend, *sizes, *ops, *coll_json); });
}

}  // namespace trainscope::cli
