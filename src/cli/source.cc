#include "cli/source.h"

#include <fmt/format.h>

#include <filesystem>

#include "store/run_io.h"
#include "store/run_store.h"
#ifdef TRAINSCOPE_WITH_INGEST
#include "ingest/importer.h"
#endif

namespace trainscope::cli {

namespace fs = std::filesystem;

namespace {

// series_in_store: the run's metadata and recorded findings only (LoadedRun::series_in_store).
Status LoadStore(const std::string& path, LoadedRun* run, bool series_in_store) {
  run->source = path;
  run->format = "trainscope";
  run->series_in_store = series_in_store;
  std::unique_ptr<RunStore> store;
  Status s = RunStore::OpenReadOnly(path, &store);
  if (!s.ok()) return s;
  if (series_in_store) {
    s = ReadRunMeta(*store, &run->data);
    if (!s.ok() || store->damage().count() == 0) return s;
    run->data = RunData();  // damage already: read whole, which says what it skipped
    return LoadStore(path, run, false);
  }
  s = ReadRun(*store, &run->data);
  // A damaged store is read around its damage: say what was skipped.
  if (s.ok() && store->damage().count()) {
    run->damage = store->damage().Summary();
    fmt::print(stderr, "warning: {}: {}\n", path, run->damage);
  }
  return s;
}

// A run in a database (postgresql://...#project/run), or the runs of a database or of one
// project in it, as a logdir's.
Status LoadDatabase(const std::string& location, std::vector<LoadedRun>* runs, bool* is_logdir, bool series_in_store) {
  const size_t hash = location.find('#');
  const size_t slash = hash == std::string::npos ? std::string::npos : location.find('/', hash);
  std::vector<RunEntry> entries;
  Status s = ListRuns(location.substr(0, slash), &entries);
  if (!s.ok()) return s;
  if (slash != std::string::npos) {
    // One run, or the runs below a name (a data-parallel run's rank-<r>), as in a logdir.
    const std::string name = location.substr(hash + 1);
    for (const RunEntry& entry : entries) {
      if (entry.name == name) {
        runs->emplace_back();
        return LoadStore(entry.dir, &runs->back(), series_in_store);
      }
    }
    std::erase_if(entries, [&](const RunEntry& e) { return e.name.rfind(name + "/", 0) != 0; });
  }
  if (entries.empty()) return Status::NotFound(location + ": no such run in the database");
  *is_logdir = true;
  for (const RunEntry& entry : entries) {
    runs->emplace_back();
    s = LoadStore(entry.dir, &runs->back(), series_in_store);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

bool StartsWithSqliteHeader(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char header[16] = {0};
  const size_t n = std::fread(header, 1, sizeof(header), f);
  std::fclose(f);
  return n == sizeof(header) && std::string(header, 15) == "SQLite format 3";
}

#ifdef TRAINSCOPE_WITH_INGEST
// Reads a file another tool wrote (or a directory of event files) into memory. Damage
// after some data is a warning on stderr, not a failure: the doctor judges what was read.
Status LoadImported(const ingest::ImportSource& source, LoadedRun* run) {
  ingest::ImportStats stats;
  Status s = ingest::ImportSourceTo(source, &run->data, &stats);
  run->source = source.path;
  run->format = run->data.meta.count("format") ? run->data.meta["format"] : stats.format;
  for (const std::string& w : stats.warnings) fmt::print(stderr, "warning: {}\n", w);
  if (!s.ok()) {
    if (stats.points() == 0) return s;
    fmt::print(stderr, "warning: {}; kept the {} points read before it\n", s.message(), stats.points());
  }
  return Status::Ok();
}

// A directory with no trainscope runs: TensorBoard runs and other tools' files in it.
Status LoadImportedDir(const std::string& path, std::vector<LoadedRun>* runs, bool* is_logdir) {
  std::vector<ingest::ImportSource> sources;
  size_t considered = 0;
  Status s = ingest::FindImportSources(path, &sources, &considered);
  if (!s.ok()) return s;
  if (sources.empty()) {
    return Status::NotFound(path + ": no runs found among " + std::to_string(considered) +
                         " files (expected a run directory holding " + kStoreFileName +
                         ", a logdir of them, TensorBoard event files, trainer_state.json, JSONL, CSV or a "
                         "training log)");
  }
  // One run: the directory is itself a TensorBoard run, or a W&B / MLflow run folder.
  *is_logdir = !(sources.size() == 1 && ((sources[0].format == ingest::Format::kTfEvents && sources[0].name == ".") ||
                                         sources[0].path == path));
  for (const ingest::ImportSource& source : sources) {
    runs->emplace_back();
    s = LoadImported(source, &runs->back());
    if (!s.ok()) return s;
  }
  return Status::Ok();
}
#endif

}  // namespace

Status LoadSources(const std::string& path, std::vector<LoadedRun>* runs, bool* is_logdir, bool series_in_store) {
  runs->clear();
  *is_logdir = false;
  if (IsDatabaseLocation(path)) return LoadDatabase(path, runs, is_logdir, series_in_store);
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::NotFound(path + ": no such file or directory");
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / kStoreFileName, ec)) {
      runs->emplace_back();
      return LoadStore(path, &runs->back(), series_in_store);
    }
    std::vector<RunEntry> entries;
    Status s = ListRuns(path, &entries);
    if (!s.ok()) return s;
    if (entries.empty()) {
#ifdef TRAINSCOPE_WITH_INGEST
      return LoadImportedDir(path, runs, is_logdir);
#endif
      return Status::NotFound(path + ": no runs found (expected a run directory holding " + kStoreFileName +
                           ", a logdir of them, or a log file another tool wrote)");
    }
    *is_logdir = true;
    for (const RunEntry& entry : entries) {
      runs->emplace_back();
      s = LoadStore(entry.dir, &runs->back(), series_in_store);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }
  // A FIFO, a device or a socket would block or never end: refused before anything opens it.
  if (Status regular = CheckRegularFile(path); !regular.ok()) return regular;
  if (StartsWithSqliteHeader(path)) {
    runs->emplace_back();
    return LoadStore(path, &runs->back(), series_in_store);
  }
#ifdef TRAINSCOPE_WITH_INGEST
  std::vector<ingest::ImportSource> sources;
  size_t considered = 0;
  Status s = ingest::FindImportSources(path, &sources, &considered);
  if (!s.ok()) return s;
  runs->emplace_back();
  return LoadImported(sources.front(), &runs->back());
#endif
  return Status::Corruption(path + ": unrecognised format (expected a trainscope run directory or store)");
}

Status LoadSeries(LoadedRun* run) {
  if (!run->series_in_store) return Status::Ok();
  LoadedRun whole;
  Status s = LoadStore(run->source, &whole, false);
  if (s.ok()) *run = std::move(whole);
  return s;
}

}  // namespace trainscope::cli
