#include "cli/source.h"

#include <filesystem>

#include "store/run_io.h"
#include "store/run_store.h"

namespace trainscope::cli {

namespace fs = std::filesystem;

namespace {

Status LoadStore(const std::string& path, LoadedRun* run) {
  std::unique_ptr<RunStore> store;
  Status s = RunStore::OpenReadOnly(path, &store);
  if (!s.ok()) return s;
  run->source = path;
  run->format = "trainscope";
  return ReadRun(*store, &run->data);
}

bool StartsWithSqliteHeader(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char header[16] = {0};
  const size_t n = std::fread(header, 1, sizeof(header), f);
  std::fclose(f);
  return n == sizeof(header) && std::string(header, 15) == "SQLite format 3";
}

}  // namespace

Status LoadSources(const std::string& path, std::vector<LoadedRun>* runs, bool* is_logdir) {
  runs->clear();
  *is_logdir = false;
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::Error(path + ": no such file or directory");
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / kStoreFileName, ec)) {
      runs->emplace_back();
      return LoadStore(path, &runs->back());
    }
    std::vector<RunEntry> entries;
    Status s = ListRuns(path, &entries);
    if (!s.ok()) return s;
    if (entries.empty()) {
      return Status::Error(path + ": no runs found (expected a run directory holding " + kStoreFileName +
                           ", a logdir of them, or a log file another tool wrote)");
    }
    *is_logdir = true;
    for (const RunEntry& entry : entries) {
      runs->emplace_back();
      s = LoadStore(entry.dir, &runs->back());
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }
  if (StartsWithSqliteHeader(path)) {
    runs->emplace_back();
    return LoadStore(path, &runs->back());
  }
  return Status::Error(path + ": unrecognised format (expected a trainscope run directory or store)");
}

}  // namespace trainscope::cli
