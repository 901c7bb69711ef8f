// Kineto Chrome-trace reading with simdjson's DOM parser (the whole document is parsed in
// one pass into simdjson's tape; events are then walked once, each object's fields once).
#include <dirent.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <simdjson.h>

#include "perf/trace.h"

namespace trainscope::perf {

namespace {

constexpr size_t kMaxTraceBytes = size_t{3} << 30;  // simdjson's DOM limit is 4 GiB

// A Chrome-trace category to its kind. Both Kineto's lower-case names and the older
// capitalised ones ("Kernel", "Memcpy", "Runtime", "Operator") appear in real files.
EventKind KindOfCategory(std::string_view cat) {
  if (cat == "cpu_op" || cat == "Operator") return EventKind::kCpuOp;
  if (cat == "user_annotation") return EventKind::kUserAnnotation;
  if (cat == "python_function") return EventKind::kPythonFunction;
  if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "Runtime" || cat == "Driver") return EventKind::kRuntime;
  if (cat == "kernel" || cat == "Kernel") return EventKind::kKernel;
  if (cat == "gpu_memcpy" || cat == "Memcpy") return EventKind::kMemcpy;
  if (cat == "gpu_memset" || cat == "Memset") return EventKind::kMemset;
  if (cat == "cuda_sync") return EventKind::kGpuSync;
  if (cat == "gpu_user_annotation") return EventKind::kGpuAnnotation;
  return EventKind::kOther;
}

// A JSON number (integer or not) as a double; false for anything else.
bool NumberOf(simdjson::dom::element value, double* out) {
  switch (value.type()) {
    case simdjson::dom::element_type::INT64: {
      int64_t i = 0;
      if (value.get_int64().get(i)) return false;
      *out = static_cast<double>(i);
      return true;
    }
    case simdjson::dom::element_type::UINT64: {
      uint64_t u = 0;
      if (value.get_uint64().get(u)) return false;
      *out = static_cast<double>(u);
      return true;
    }
    case simdjson::dom::element_type::DOUBLE: return !value.get_double().get(*out);
    default: return false;
  }
}

bool IntegerOf(simdjson::dom::element value, int64_t* out) {
  if (value.type() == simdjson::dom::element_type::INT64) return !value.get_int64().get(*out);
  double d;
  if (!NumberOf(value, &d) || !std::isfinite(d) || std::fabs(d) > 9.2e18) return false;
  *out = static_cast<int64_t>(d);
  return true;
}

// A string element's text; "" when it is not a string.
std::string_view StringOf(simdjson::dom::element value) {
  std::string_view text;
  if (value.get_string().get(text)) return {};
  return text;
}

// Bytes per element of a torch dtype as Kineto writes it ("Float", "BFloat16", "c10::Half").
int64_t DtypeBytes(std::string_view dtype) {
  std::string d(dtype);
  std::transform(d.begin(), d.end(), d.begin(), [](unsigned char c) { return std::tolower(c); });
  if (d.find("double") != std::string::npos || d.find("long") != std::string::npos || d == "int64") return 8;
  if (d.find("bfloat16") != std::string::npos || d.find("half") != std::string::npos || d == "short" || d == "int16") return 2;
  if (d.find("float8") != std::string::npos || d == "byte" || d == "char" || d == "bool" || d.find("int8") != std::string::npos) return 1;
  if (d.find("float") != std::string::npos || d == "int" || d == "int32") return 4;
  return 0;
}

bool IsGzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// The whole file in one read, into simdjson's padded buffer (no copies: the traces that
// matter are hundreds of MB).
Status ReadWholeFile(const std::string& path, simdjson::padded_string* bytes) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::NotFound(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st;
  if (::fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    std::fclose(f);
    return Status::InvalidArgument(path + ": not a regular file; expected a profiler trace");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > kMaxTraceBytes) {
    std::fclose(f);
    return Status::InvalidArgument(path + ": over 3 GiB; expected a profiler trace under that size");
  }
  simdjson::padded_string buffer(size);
  const size_t got = size ? std::fread(buffer.data(), 1, size, f) : 0;
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed || got != size) return Status::IOError(path + ": read failed after " + std::to_string(got) + " bytes");
  *bytes = std::move(buffer);
  return Status::Ok();
}

Status Gunzip(const std::string& path, std::string_view compressed, std::string* out) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) return Status::Internal(path + ": zlib could not start");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  z.avail_in = static_cast<uInt>(compressed.size());
  out->clear();
  char buffer[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buffer);
    z.avail_out = sizeof(buffer);
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      const std::string why = z.msg ? z.msg : "truncated or damaged data";
      const uint64_t at = z.total_in;
      inflateEnd(&z);
      return Status::Corruption(path + ": gzip offset " + std::to_string(at) + ": " + why);
    }
    out->append(buffer, sizeof(buffer) - z.avail_out);
    if (out->size() > kMaxTraceBytes) {
      inflateEnd(&z);
      return Status::InvalidArgument(path + ": decompresses to over 3 GiB; expected a profiler trace under that size");
    }
    if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0) {
      inflateEnd(&z);
      return Status::Corruption(path + ": gzip stream cut short after " + std::to_string(z.total_in) + " bytes");
    }
  }
  inflateEnd(&z);
  return Status::Ok();
}

void ReadDistributedInfo(simdjson::dom::object info, Trace* trace) {
  for (auto field : info) {
    int64_t v;
    if (field.key == "rank" && IntegerOf(field.value, &v)) trace->rank = v;
    else if (field.key == "world_size" && IntegerOf(field.value, &v)) trace->world_size = v;
    else if (field.key == "backend" && field.value.is_string()) trace->backend = std::string(StringOf(field.value));
  }
}

// One "X" event's args: the links and, for a collective, its metadata.
// The element count of the first tensor in "Input Dims" ([[d0, d1]] or, for a tensor
// list, [[[d0, d1]]]); -1 when there is none.
int64_t FirstTensorElements(simdjson::dom::element dims) {
  simdjson::dom::array outer, shape;
  if (dims.get_array().get(outer)) return -1;
  for (simdjson::dom::element first : outer) {
    if (first.get_array().get(shape)) return -1;
    simdjson::dom::array inner;
    for (simdjson::dom::element d : shape) {
      if (!d.get_array().get(inner)) shape = inner;  // a tensor list: its first tensor
      break;
    }
    int64_t count = 1, n = 0, v;
    for (simdjson::dom::element d : shape) {
      if (!IntegerOf(d, &v) || v < 0 || (v > 0 && count > (int64_t{1} << 50) / v)) return -1;
      count *= v;
      ++n;
    }
    return n ? count : 1;
  }
  return -1;
}

// The collective a Gloo range names ("gloo:all_reduce" -> "all_reduce"); "" if it is none.
std::string_view GlooCollective(std::string_view name) {
  return name.substr(0, 5) == "gloo:" ? name.substr(5) : std::string_view();
}

void ReadArgs(simdjson::dom::object args, std::string_view name, TraceEvent* e, Trace* trace) {
  CollectiveMeta meta;
  bool is_collective = false;
  // Gloo runs a collective inside its "gloo:<op>" range, so the range's time is the
  // transfer's, and with record_shapes its input's dims and type are the message.
  const std::string_view gloo = GlooCollective(name);
  int64_t gloo_elems = -1, gloo_bytes = 0;
  for (auto field : args) {
    const std::string_view key = field.key;
    int64_t v;
    if (key == "stream") {
      if (IntegerOf(field.value, &v)) e->stream = v;
    } else if (key == "correlation") {
      if (IntegerOf(field.value, &v)) e->correlation = v;
    } else if (key == "External id") {
      if (IntegerOf(field.value, &v)) e->external_id = v;
    } else if (key == "Collective name") {
      if (field.value.is_string()) {
        meta.name = std::string(StringOf(field.value));
        is_collective = true;
      }
    } else if (key == "In msg nelems" || key == "In msg size") {
      if (IntegerOf(field.value, &v)) meta.in_elems = v;
    } else if (key == "Out msg nelems" || key == "Out msg size") {
      if (IntegerOf(field.value, &v)) meta.out_elems = v;
    } else if (key == "Group size") {
      if (IntegerOf(field.value, &v)) meta.group_size = v;
    } else if (key == "dtype") {
      if (field.value.is_string()) meta.element_bytes = DtypeBytes(StringOf(field.value));
    } else if (!gloo.empty() && key == "Input Dims") {
      gloo_elems = FirstTensorElements(field.value);
    } else if (!gloo.empty() && key == "Input type") {
      simdjson::dom::array types;
      if (!field.value.get_array().get(types)) {
        for (simdjson::dom::element t : types) {
          gloo_bytes = DtypeBytes(StringOf(t));
          break;
        }
      }
    }
  }
  if (!is_collective && !gloo.empty() && gloo_elems > 0 && gloo_bytes > 0) {
    meta.name = std::string(gloo);
    meta.element_bytes = gloo_bytes;
    meta.in_elems = gloo_elems;
    // all_gather's input is one rank's part; nccl-tests' size is the gathered whole.
    const bool gather = gloo.find("gather") != std::string_view::npos;
    meta.out_elems = gather && trace->world_size > 0 ? gloo_elems * trace->world_size : gloo_elems;
    is_collective = true;
  }
  if (is_collective) {
    e->collective = static_cast<int32_t>(trace->collectives.size());
    trace->collectives.push_back(std::move(meta));
  }
}

Status ParseTrace(const std::string& path, simdjson::padded_string json, Trace* trace, size_t* skipped);

}  // namespace

const char* EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kCpuOp: return "cpu_op";
    case EventKind::kUserAnnotation: return "user_annotation";
    case EventKind::kPythonFunction: return "python_function";
    case EventKind::kRuntime: return "runtime";
    case EventKind::kKernel: return "kernel";
    case EventKind::kMemcpy: return "gpu_memcpy";
    case EventKind::kMemset: return "gpu_memset";
    case EventKind::kGpuSync: return "cuda_sync";
    case EventKind::kGpuAnnotation: return "gpu_user_annotation";
    case EventKind::kOther: return "other";
  }
  return "other";
}

bool Trace::HasGpu() const {
  for (const TraceEvent& e : events) {
    if (e.kind == EventKind::kKernel || e.kind == EventKind::kMemcpy || e.kind == EventKind::kMemset) return true;
  }
  return false;
}

uint32_t Trace::Intern(std::string_view name) {
  auto it = name_index_.find(std::string(name));
  if (it != name_index_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(names.size());
  names.emplace_back(name);
  name_index_.emplace(names.back(), id);
  return id;
}

Status ReadKinetoTrace(const std::string& path, Trace* trace, size_t* skipped) {
  simdjson::padded_string json;
  Status s = ReadWholeFile(path, &json);
  if (!s.ok()) {
    *trace = Trace();
    trace->path = path;
    return s;
  }
  return ParseTrace(path, std::move(json), trace, skipped);
}

Status ParseKinetoTrace(const std::string& name, std::string_view bytes, Trace* trace, size_t* skipped) {
  return ParseTrace(name, simdjson::padded_string(bytes), trace, skipped);
}

namespace {

// The events array of a Kineto trace {"traceEvents": [...]} or of the JSON Array Format, and
// the facts the root holds beside it (distributedInfo, deviceProperties).
Status FindEvents(const std::string& path, simdjson::dom::element doc, Trace* trace, simdjson::dom::array* events) {
  bool has_events = false;
  simdjson::dom::object root;
  if (!doc.get_array().get(*events)) {
    // Chrome's JSON Array Format: the autograd profiler's export when PyTorch is built
    // without Kineto (Debian's torch 1.13): events only, no categories, no process facts.
    has_events = true;
  } else if (doc.get_object().get(root)) {
    return Status::InvalidArgument(path + ": the document is neither a JSON object nor an array of events; expected a "
                                          "Kineto trace {\"traceEvents\": [...]}");
  } else {
    for (auto field : root) {
      if (field.key == "traceEvents") {
        if (field.value.get_array().get(*events)) {
          return Status::InvalidArgument(path + ": \"traceEvents\" is not an array; expected a list of trace events");
        }
        has_events = true;
      } else if (field.key == "distributedInfo") {
        simdjson::dom::object info;
        if (!field.value.get_object().get(info)) ReadDistributedInfo(info, trace);
      } else if (field.key == "deviceProperties") {
        simdjson::dom::array devices;
        if (!field.value.get_array().get(devices)) {
          for (simdjson::dom::element d : devices) {
            std::string_view name;
            if (!d["name"].get_string().get(name)) trace->device_names.emplace_back(name);
          }
        }
      }
    }
  }
  if (!has_events) return Status::InvalidArgument(path + ": no \"traceEvents\" array; expected a PyTorch profiler (Kineto) trace");
  return Status::Ok();
}

// One item of the events array into trace. What is not timed work (metadata, instants,
// counters) is passed over; a flow link counted; a malformed event counted in *bad, the first
// described in *first_bad.
void ReadEvent(simdjson::dom::element item, size_t index, Trace* trace, size_t* bad, std::string* first_bad) {
  simdjson::dom::object ev;
  if (item.get_object().get(ev)) {
    ++*bad;
    if (first_bad->empty()) *first_bad = "event " + std::to_string(index) + " is not an object";
    return;
  }
  std::string_view ph, cat, name;
  double ts = 0, dur = -1;
  bool has_ts = false, ts_bad = false;
  simdjson::dom::object args;
  bool has_args = false;
  TraceEvent e;
  for (auto field : ev) {
    const std::string_view key = field.key;
    if (key == "ph") {
      if (field.value.is_string()) ph = StringOf(field.value);
    } else if (key == "cat") {
      if (field.value.is_string()) cat = StringOf(field.value);
    } else if (key == "name") {
      if (field.value.is_string()) name = StringOf(field.value);
    } else if (key == "ts") {
      has_ts = NumberOf(field.value, &ts);
      ts_bad = !has_ts;
    } else if (key == "dur") {
      if (!NumberOf(field.value, &dur)) dur = -2;
    } else if (key == "pid") {
      IntegerOf(field.value, &e.pid);
    } else if (key == "tid") {
      IntegerOf(field.value, &e.tid);
    } else if (key == "args") {
      has_args = !field.value.get_object().get(args);
    }
  }
  if (ph == "s" || ph == "f") {
    if (cat == "ac2g") ++trace->flow_links;
    return;
  }
  if (ph != "X") return;  // metadata, instants, counters: not timed work
  if (!has_ts || ts_bad || dur < 0) {
    ++*bad;
    if (first_bad->empty()) {
      *first_bad = "event " + std::to_string(index) + " (\"" + std::string(name.substr(0, 80)) + "\")" +
                  (has_ts ? (dur == -2 ? " has a \"dur\" that is not a number" : " has no \"dur\" or a negative one")
                          : " has no numeric \"ts\"");
    }
    return;
  }
  e.kind = KindOfCategory(cat);
  // No category (the legacy array format): the steps and record_function ranges are
  // annotations, everything else an operator.
  if (cat.empty()) {
    e.kind = name.substr(0, 13) == "ProfilerStep#" || name.substr(0, 10) == "enumerate(" ? EventKind::kUserAnnotation
                                                                                         : EventKind::kCpuOp;
  }
  e.name = trace->Intern(name);
  e.ts_us = ts;
  e.dur_us = dur;
  if (has_args) ReadArgs(args, name, &e, trace);
  trace->events.push_back(e);
}

Status ParseTrace(const std::string& path, simdjson::padded_string json, Trace* trace, size_t* skipped) {
  *trace = Trace();
  trace->path = path;
  Status s;
  if (IsGzip(std::string_view(json.data(), json.size()))) {
    std::string plain;
    plain.reserve(json.size() * 8);
    s = Gunzip(path, std::string_view(json.data(), json.size()), &plain);
    if (!s.ok()) return s;
    json = simdjson::padded_string(plain);
  }
  if (json.size() == 0) return Status::InvalidArgument(path + ": empty file; expected a PyTorch profiler (Kineto) JSON trace");
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (auto err = parser.parse(json).get(doc); err) {
    return Status::Corruption(path + ": not valid JSON (" + simdjson::error_message(err) +
                              "); expected a PyTorch profiler (Kineto) trace");
  }
  simdjson::dom::array events;
  s = FindEvents(path, doc, trace, &events);
  if (!s.ok()) return s;

  size_t bad = 0, index = 0;
  std::string first_bad;
  for (simdjson::dom::element item : events) ReadEvent(item, ++index, trace, &bad, &first_bad);
  if (skipped) *skipped = bad;
  if (trace->events.empty()) {
    return Status::InvalidArgument(path + ": no timed (\"ph\":\"X\") events with a numeric ts and dur" +
                                   (first_bad.empty() ? std::string() : " (first bad: " + first_bad + ")") +
                                   "; expected a PyTorch profiler (Kineto) trace");
  }
  return Status::Ok();
}

}  // namespace

bool LooksLikeKinetoTrace(std::string_view prefix) {
  size_t first = prefix.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && prefix[first] == '[') {
    // The JSON Array Format of a PyTorch built without Kineto: [{"name": ..., "ph": "X", ...
    return prefix.find("\"ph\": \"X\"") != std::string_view::npos || prefix.find("\"ph\":\"X\"") != std::string_view::npos;
  }
  if (prefix.find("\"traceEvents\"") == std::string_view::npos) return false;
  for (std::string_view mark : {"\"deviceProperties\"", "\"schemaVersion\"", "\"distributedInfo\"", "\"cpu_op\"",
                                "\"user_annotation\"", "\"kernel\"", "ProfilerStep#"}) {
    if (prefix.find(mark) != std::string_view::npos) return true;
  }
  return false;
}

namespace {

class KinetoReader : public TraceReader {
 public:
  const char* format() const override { return "kineto"; }
  bool Accepts(const std::string& path, std::string_view prefix) const override {
    // A gzip file is only known once inflated: accept it and let the read say what it is.
    if (prefix.size() >= 2 && static_cast<unsigned char>(prefix[0]) == 0x1f && static_cast<unsigned char>(prefix[1]) == 0x8b) return true;
    return LooksLikeKinetoTrace(prefix);
  }
  Status Read(const std::string& path, Trace* trace) const override { return ReadKinetoTrace(path, trace); }
};

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && std::string_view(s).substr(s.size() - suffix.size()) == suffix;
}

std::string FilePrefix(const std::string& path, size_t bytes) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  out.resize(bytes);
  out.resize(std::fread(out.data(), 1, bytes, f));
  std::fclose(f);
  return out;
}

}  // namespace

const std::vector<std::unique_ptr<TraceReader>>& TraceReaders() {
  static const std::vector<std::unique_ptr<TraceReader>> readers = [] {
    std::vector<std::unique_ptr<TraceReader>> r;
    r.push_back(std::make_unique<KinetoReader>());
    return r;
  }();
  return readers;
}

Status ReadTraceFile(const std::string& path, Trace* trace) {
  const std::string prefix = FilePrefix(path, 64 * 1024);
  for (const auto& reader : TraceReaders()) {
    if (reader->Accepts(path, prefix)) return reader->Read(path, trace);
  }
  // Not sniffed as any reader's: let the Kineto reader name what is wrong with it.
  return ReadKinetoTrace(path, trace);
}

Status ExpandTracePaths(const std::vector<std::string>& paths, std::vector<std::string>* files) {
  files->clear();
  for (const std::string& path : paths) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Status::NotFound(path + ": no such file or folder");
    if (!S_ISDIR(st.st_mode)) {
      files->push_back(path);
      continue;
    }
    DIR* dir = ::opendir(path.c_str());
    if (!dir) return Status::IOError(path + ": cannot list the folder (" + std::strerror(errno) + ")");
    std::vector<std::string> found;
    while (dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (!EndsWith(name, ".json") && !EndsWith(name, ".json.gz")) continue;
      const std::string full = path + (EndsWith(path, "/") ? "" : "/") + name;
      const std::string prefix = FilePrefix(full, 64 * 1024);
      for (const auto& reader : TraceReaders()) {
        if (reader->Accepts(full, prefix)) {
          found.push_back(full);
          break;
        }
      }
    }
    ::closedir(dir);
    if (found.empty()) return Status::NotFound(path + ": no profiler trace (*.json, *.json.gz with \"traceEvents\") in the folder");
    std::sort(found.begin(), found.end());
    files->insert(files->end(), found.begin(), found.end());
  }
  return Status::Ok();
}

}  // namespace trainscope::perf
