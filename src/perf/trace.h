// A profiler trace of one rank, as the analyses need it: the timed events (CPU operators,
// annotations, runtime calls, GPU kernels, copies, syncs) with their names interned, the
// links from a CPU launch to the GPU work it started (correlation ids), and the facts the
// trace carries about its process (rank, world size, backend, devices).
//
// Readers fill it from a file: `ReadKinetoTrace` reads PyTorch profiler (Kineto) Chrome
// traces, .json or .json.gz; `TraceReader` is the seam another source (an Nsight Systems
// SQLite export, docs/traces.md) implements to feed the same analyses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace trainscope::perf {

// What an event is, from its Chrome-trace category ("cat").
enum class EventKind : uint8_t {
  kCpuOp,           // cpu_op, operator: an aten:: operator on a host thread
  kUserAnnotation,  // user_annotation: record_function ranges, ProfilerStep#N, DataLoader
  kPythonFunction,  // python_function: the Python stack (with_stack=True)
  kRuntime,         // cuda_runtime, cuda_driver: the host side of a launch
  kKernel,          // kernel: GPU work
  kMemcpy,          // gpu_memcpy
  kMemset,          // gpu_memset
  kGpuSync,         // cuda_sync: a synchronisation the GPU timeline records
  kGpuAnnotation,   // gpu_user_annotation: a range on the GPU timeline (not work itself)
  kOther,           // anything else with a duration (Trace, Overhead, ...)
};

const char* EventKindName(EventKind kind);

struct TraceEvent {
  EventKind kind = EventKind::kOther;
  uint32_t name = 0;          // index into Trace::names
  double ts_us = 0;           // start, microseconds, as the file has it
  double dur_us = 0;          // duration, microseconds (>= 0)
  int64_t pid = 0, tid = 0;
  int64_t stream = -1;        // GPU stream, -1 for host events
  int64_t correlation = -1;   // launch <-> GPU work link, -1 if none
  int64_t external_id = -1;   // operator <-> runtime call link, -1 if none
  int32_t collective = -1;    // index into Trace::collectives, -1 if none

  double end_us() const { return ts_us + dur_us; }
  bool on_gpu() const {
    return kind == EventKind::kKernel || kind == EventKind::kMemcpy || kind == EventKind::kMemset ||
           kind == EventKind::kGpuSync;
  }
};

// A collective's metadata, from a record_param_comms operator or an NCCL kernel's args.
struct CollectiveMeta {
  std::string name;           // "allreduce", "all_gather", ... as the trace names it
  int64_t in_elems = -1, out_elems = -1;
  int64_t element_bytes = 0;  // from "dtype"; 0 unknown
  int64_t group_size = 0;     // from "Group size"; 0 unknown
};

struct Trace {
  std::string path;
  int64_t rank = -1;          // distributedInfo.rank; -1 when the trace does not say
  int64_t world_size = 0;
  std::string backend;        // nccl, gloo, ... or ""
  std::vector<std::string> device_names;  // deviceProperties[].name
  std::vector<std::string> names;          // interned event names
  std::vector<TraceEvent> events;          // timed events ("ph":"X"), file order
  std::vector<CollectiveMeta> collectives;
  // Flow events "ac2g" (launch -> GPU) where the events lack a correlation id: id -> start ts.
  size_t flow_links = 0;      // how many ac2g flows the file had (for the report)

  const std::string& Name(const TraceEvent& e) const { return names[e.name]; }
  bool HasGpu() const;
  // Interns `name`, returning its index (used by readers).
  uint32_t Intern(std::string_view name);

 private:
  std::unordered_map<std::string, uint32_t> name_index_;
};

// The seam for sources other than Kineto JSON: a reader fills a Trace from one file and
// says, before reading, whether a file is its kind.
class TraceReader {
 public:
  virtual ~TraceReader() = default;
  virtual const char* format() const = 0;
  virtual bool Accepts(const std::string& path, std::string_view prefix) const = 0;
  virtual Status Read(const std::string& path, Trace* trace) const = 0;
};

// Reads a Kineto Chrome trace (.json, or gzip-compressed .json.gz, sniffed by content), or
// the bare array of events the autograd profiler writes when PyTorch has no Kineto.
// Errors name the file and what was wrong: not JSON, no "traceEvents" array, an event
// whose "ts" or "dur" is not a number (such events are skipped and counted in *skipped
// when skipped is non-null; the read fails only when nothing timed is left).
Status ReadKinetoTrace(const std::string& path, Trace* trace, size_t* skipped = nullptr);
// The same from bytes in memory (gzip or not); `name` is what errors call it.
Status ParseKinetoTrace(const std::string& name, std::string_view bytes, Trace* trace, size_t* skipped = nullptr);

// True when the first bytes look like a Kineto trace: a JSON object with "traceEvents"
// and Kineto's marks ("deviceProperties", "schemaVersion", "distributedInfo", or events
// with "ph":"X" and a Kineto category). Used by format sniffing elsewhere (diagnose).
bool LooksLikeKinetoTrace(std::string_view prefix);

// The readers this build has, Kineto first.
const std::vector<std::unique_ptr<TraceReader>>& TraceReaders();

// Expands paths: a file stays itself; a folder gives its *.json and *.json.gz files
// (sorted, not recursing) that look like traces. Errors for a missing path or a folder
// with no trace in it.
Status ExpandTracePaths(const std::vector<std::string>& paths, std::vector<std::string>* files);

// Reads one file with the first reader that accepts it.
Status ReadTraceFile(const std::string& path, Trace* trace);

}  // namespace trainscope::perf
