#include "ingest/mlflow_reader.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/tag.h"
#include "ingest/mapped_file.h"
#include "ingest/parse_util.h"
#include "ingest/yaml_loader.h"

namespace trainscope::ingest {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;
constexpr size_t kMaxFiles = 100000;

std::string Json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

Status ReadSmall(const fs::path& p, std::unique_ptr<MappedFile>* file) {
  Status s = MappedFile::Open(p.string(), file);
  if (!s.ok()) return s;
  if ((*file)->size() > kMaxFileBytes) return Status::InvalidArgument(p.string() + ": over 1 GiB; expected an MLflow metric or value file");
  return Status::Ok();
}

// The files under dir (recursively), as keys relative to it with '/' separators, sorted.
std::vector<std::pair<std::string, fs::path>> KeyFiles(const fs::path& dir) {
  std::vector<std::pair<std::string, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end && out.size() < kMaxFiles; it.increment(ec)) {
    if (it.depth() > 8) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
    out.emplace_back(fs::relative(it->path(), dir, ec).generic_string(), it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

const char* StatusName(int64_t code) {
  switch (code) {
    case 1: return "running";
    case 2: return "scheduled";
    case 3: return "finished";
    case 4: return "failed";
    case 5: return "killed";
    default: return "unknown";
  }
}

}  // namespace

bool IsMlflowRunFolder(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  return fs::is_regular_file(d / "meta.yaml", ec) && (fs::is_directory(d / "metrics", ec) || fs::is_directory(d / "params", ec));
}

Status ReadMlflowMetricText(std::string_view text, const std::string& tag, const std::string& name, SampleSink* sink,
                            ImportStats* stats) {
  if (!ValidateTag(tag).ok()) {
    ++stats->damaged;
    stats->Warn(name + ": metric key is not a valid series name; file skipped");
    return Status::Ok();
  }
  uint64_t line_number = 0;
  int64_t index = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_number;
    line = Trim(line);
    if (line.empty()) continue;
    ++stats->records;
    // "<timestamp> <value> [<step>]"
    std::string_view fields[3];
    size_t n = 0;
    bool too_many = false;
    while (!line.empty()) {
      const size_t sp = line.find_first_of(" \t");
      if (n == 3) {
        too_many = true;
        break;
      }
      fields[n++] = line.substr(0, sp);
      line = sp == std::string_view::npos ? std::string_view() : Trim(line.substr(sp));
    }
    int64_t timestamp = 0, step = index;
    double value;
    if (too_many || n < 2 || !ParseStep(fields[0], &timestamp) || !ParseNumber(fields[1], &value) ||
        (n == 3 && !ParseStep(fields[2], &step))) {
      ++stats->damaged;
      stats->Warn(name + ": line " + std::to_string(line_number) + ": expected \"<timestamp ms> <value> [<step>]\"; skipped");
      continue;
    }
    sink->OnScalar(tag, step, static_cast<double>(timestamp) / 1000.0, value);
    ++stats->scalars;
    ++index;
  }
  return Status::Ok();
}

Status ReadMlflowRunMeta(std::string_view text, const std::string& name, SampleSink* sink) {
  json doc;
  Status s = ParseYaml(text, name, &doc);
  if (!s.ok()) return s;
  if (!doc.is_object()) return Status::Corruption(name + ": expected a mapping (MLflow run meta.yaml)");
  auto text_of = [&](const char* key) -> std::string {
    auto it = doc.find(key);
    if (it == doc.end() || it->is_null()) return "";
    return it->is_string() ? it->get<std::string>() : it->dump();
  };
  std::string run_name = text_of("run_name");
  if (run_name.empty()) run_name = text_of("name");
  if (!run_name.empty() && IsValidUtf8(run_name)) sink->OnMeta("mlflow_run_name", run_name);
  const std::string run_id = text_of("run_id");
  if (!run_id.empty() && IsValidUtf8(run_id)) sink->OnMeta("mlflow_run_id", run_id);
  auto status = doc.find("status");
  if (status != doc.end() && status->is_number_integer()) sink->OnMeta("mlflow_status", StatusName(status->get<int64_t>()));
  for (const char* key : {"start_time", "end_time"}) {
    auto it = doc.find(key);
    if (it != doc.end() && it->is_number()) sink->OnMeta(std::string("mlflow_") + key, std::to_string(it->get<double>() / 1000.0));
  }
  return Status::Ok();
}

Status ReadMlflowRun(const std::string& dir, SampleSink* sink, ImportStats* stats) {
  stats->format = "mlflow";
  const fs::path d(dir);
  json files = json::array();  // every file read, relative to the run folder (meta "mlflow_files")
  std::error_code rel_ec;
  auto note = [&](const fs::path& p) { files.push_back(fs::relative(p, d, rel_ec).generic_string()); };
  std::unique_ptr<MappedFile> file;
  Status s = ReadSmall(d / "meta.yaml", &file);
  if (!s.ok()) return s;
  ++stats->records;
  note(d / "meta.yaml");
  s = ReadMlflowRunMeta(file->view(), (d / "meta.yaml").string(), sink);
  if (!s.ok()) stats->Warn(s.message());
  // The experiment's name, one folder up.
  std::error_code ec;
  const fs::path experiment = d.parent_path() / "meta.yaml";
  if (fs::is_regular_file(experiment, ec) && ReadSmall(experiment, &file).ok()) {
    note(experiment);
    json doc;
    if (ParseYaml(file->view(), experiment.string(), &doc).ok() && doc.is_object() && doc.contains("name") &&
        doc["name"].is_string() && IsValidUtf8(doc["name"].get<std::string>())) {
      sink->OnMeta("mlflow_experiment", doc["name"].get<std::string>());
    }
  }
  for (const char* part : {"params", "tags"}) {
    json values = json::object();
    for (const auto& [key, path] : KeyFiles(d / part)) {
      if (!ReadSmall(path, &file).ok()) continue;
      ++stats->records;
      note(path);
      std::string v(file->view().substr(0, 64 << 10));
      if (!IsValidUtf8(key) || !IsValidUtf8(v)) {
        ++stats->damaged;
        continue;
      }
      values[key] = v;
    }
    if (!values.empty()) sink->OnMeta(std::string(part) == "params" ? "config" : "mlflow_tags", Json(values));
  }
  for (const auto& [key, path] : KeyFiles(d / "metrics")) {
    s = ReadSmall(path, &file);
    if (!s.ok()) {
      ++stats->damaged;
      stats->Warn(s.message());
      continue;
    }
    stats->bytes += file->size();
    note(path);
    ReadMlflowMetricText(file->view(), key, path.string(), sink, stats);
  }
  sink->OnMeta("mlflow_files", Json(files));
  if (stats->scalars == 0) {
    return Status::Corruption(dir + ": an MLflow run with no metric values (metrics/<key> files of \"<timestamp> <value> <step>\" lines)");
  }
  return Status::Ok();
}

}  // namespace trainscope::ingest
