// `trainscope import SRC -o RUNDIR [--format F] [--role ROLE=TAG]...`: reads a file another
// tool wrote (or a TensorBoard logdir) and stores it as a trainscope run, so every other
// command treats it like a recorded one. A logdir of several runs becomes one run
// directory per source under RUNDIR.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/json_number.h"
#include "doctor/doctor.h"
#include "ingest/importer.h"
#include "store/run_io.h"
#include "store/run_store.h"

namespace trainscope::cli {

namespace {

namespace fs = std::filesystem;
using ingest::ImportSource;
using ingest::ImportStats;

// A progress bar on stderr for imports that run longer than a second; silent when stderr
// is not a terminal.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label)
      : label_(std::move(label)), tty_(isatty(2) != 0), start_(std::chrono::steady_clock::now()) {}
  ~ProgressBar() { Done(); }
  // Completes the bar (if one was shown) and ends its line.
  void Done() {
    if (!shown_) return;
    if (total_) Update(total_, total_);
    fmt::print(stderr, "\n");
    shown_ = false;
  }
  void Update(uint64_t done, uint64_t total) {
    total_ = total;
    if (!tty_ || total == 0) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (elapsed < 1.0) return;
    shown_ = true;
    const int width = 30;
    const double frac = std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
    const int filled = static_cast<int>(frac * width);
    fmt::print(stderr, "\r{} [{}{}] {:3.0f}% {:.0f}/{:.0f} MB {:.0f} MB/s", label_, std::string(filled, '#'),
               std::string(width - filled, ' '), frac * 100, done / 1e6, total / 1e6, done / 1e6 / elapsed);
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool tty_;
  bool shown_ = false;
  uint64_t total_ = 0;
  std::chrono::steady_clock::time_point start_;
};

// Every sample goes to the store and to the doctor, so an imported run is stored with its
// findings, and the dashboard shows them as it shows a recorded run's.
class TeeSink : public SampleSink {
 public:
  TeeSink(SampleSink* store, SampleSink* doctor) : store_(store), doctor_(doctor) {}
  // The first and last wall time the source recorded (0, 0 when it has none): the imported
  // run's own start and end, not the time of the import.
  double first_wall() const { return first_wall_; }
  double last_wall() const { return last_wall_; }
  void OnScalar(std::string_view tag, int64_t step, double wall_time, double value) override {
    Saw(wall_time);
    store_->OnScalar(tag, step, wall_time, value);
    doctor_->OnScalar(tag, step, wall_time, value);
  }
  void OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) override {
    Saw(wall_time);
    store_->OnTensorStats(tag, step, wall_time, stats);
    doctor_->OnTensorStats(tag, step, wall_time, stats);
  }
  void OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) override {
    store_->OnVector(tag, step, wall_time, values);
    doctor_->OnVector(tag, step, wall_time, values);
  }
  void OnSpan(const Span& span) override {
    store_->OnSpan(span);
    doctor_->OnSpan(span);
  }
  void OnFinding(const Finding& finding) override { store_->OnFinding(finding); }
  void OnMeta(std::string_view key, std::string_view value) override {
    store_->OnMeta(key, value);
    doctor_->OnMeta(key, value);
  }

 private:
  void Saw(double wall_time) {
    if (!(wall_time > 0) || !std::isfinite(wall_time)) return;
    first_wall_ = first_wall_ > 0 ? std::min(first_wall_, wall_time) : wall_time;
    last_wall_ = std::max(last_wall_, wall_time);
  }

  SampleSink* store_;
  SampleSink* doctor_;
  double first_wall_ = 0, last_wall_ = 0;
};

std::string SafeName(std::string name) {
  for (char& c : name) {
    if (c == '/' || c == '\\' || c == ':' || static_cast<unsigned char>(c) < 0x20) c = '_';
  }
  if (name.empty() || name == "." || name == "..") name = "run";
  return name;
}

// What a store holds after an import, for --json: per series its kind, points and steps.
// With points, also every step and value as stored (non-finite values as strings "nan",
// "inf", "-inf", which JSON cannot spell), and per histogram numel, sum and sum of squares.
nlohmann::json StoreSummary(RunStore& store, bool points) {
  nlohmann::json series = nlohmann::json::object();
  std::vector<SeriesInfo> infos;
  if (!store.ListSeries(&infos).ok()) return series;
  for (const SeriesInfo& i : infos) {
    nlohmann::json entry = {{"kind", SeriesKindName(i.kind)},
                            {"points", i.points},
                            {"first_step", i.first_step},
                            {"last_step", i.last_step}};
    if (points && i.kind == SeriesKind::kScalar) {
      std::vector<Point> pts;
      if (store.ReadScalars(i.tag, INT64_MIN, INT64_MAX, &pts).ok()) {
        nlohmann::json steps = nlohmann::json::array(), values = nlohmann::json::array();
        for (const Point& p : pts) {
          steps.push_back(p.step);
          values.push_back(JsonNumber(p.value));
        }
        entry["steps"] = steps;
        entry["values"] = values;
      }
    } else if (points && i.kind == SeriesKind::kTensorStats) {
      std::vector<TensorStatsPoint> pts;
      if (store.ReadTensorStats(i.tag, INT64_MIN, INT64_MAX, &pts).ok()) {
        nlohmann::json steps = nlohmann::json::array(), stats = nlohmann::json::array();
        for (const TensorStatsPoint& p : pts) {
          steps.push_back(p.step);
          stats.push_back({{"numel", p.stats.numel}, {"sum", p.stats.sum}, {"sum_squares", p.stats.sum_squares},
                           {"zeros", p.stats.zeros}, {"abs_max", p.stats.abs_max}});
        }
        entry["steps"] = steps;
        entry["stats"] = stats;
      }
    }
    series[i.tag] = entry;
  }
  return series;
}

int ImportOne(const ImportSource& source, const std::string& run_dir, const ingest::ImportOptions& base_options,
              const std::string& command_line, nlohmann::json* report, bool with_points) {
  RunMeta meta;
  meta.name = fs::path(run_dir).filename().string();
  meta.status = "finished";
  meta.command_line = command_line;
  std::unique_ptr<RunStore> store;
  Status s = RunStore::Create(run_dir, meta, &store);
  if (!s.ok()) {
    fmt::print(stderr, "trainscope import: {}\n", s.message());
    return 2;
  }
  ProgressBar bar("importing " + source.name);
  ingest::ImportOptions options = base_options;
  options.progress = [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); };
  StoreSink sink(store.get());
  doctor::DoctorOptions doctor_options;
  doctor_options.streaming = false;  // the whole log is known: judged as `diagnose` judges it
  doctor::Doctor doctor(std::move(doctor_options));
  TeeSink tee(&sink, &doctor);
  ImportStats stats;
  const Status read = ingest::ImportSourceTo(source, &tee, &stats, options);
  doctor.Finish();
  for (const Finding& f : doctor.findings()) sink.OnFinding(f);
  s = sink.Finish();
  bar.Done();
  // Damage in the source is not a crash of the run: keep what was read, say what stopped it.
  if (s.ok() && !read.ok()) s = store->SetMetaValue("import_error", read.message());
  if (s.ok()) s = store->Close("finished", "");
  if (s.ok() && tee.first_wall() > 0) s = store->SetMetaValue("start_time", fmt::format("{:.17g}", tee.first_wall()));
  if (s.ok() && tee.last_wall() > 0) s = store->SetMetaValue("end_time", fmt::format("{:.17g}", tee.last_wall()));
  if (!s.ok()) {
    fmt::print(stderr, "trainscope import: {}: {}\n", run_dir, s.message());
    return 2;
  }
  if (report) {
    std::unique_ptr<RunStore> reader;
    nlohmann::json entry = {{"source", source.path},
                            {"run", run_dir},
                            {"import", nlohmann::json::parse(ingest::ImportStatsToJson(stats))},
                            {"error", read.ok() ? "" : read.message()}};
    if (RunStore::OpenReadOnly(run_dir, &reader).ok()) {
      entry["series"] = StoreSummary(*reader, with_points);
      RunMeta meta;
      if (reader->ReadMeta(&meta).ok()) {
        auto roles = meta.extra.find("roles");
        if (roles != meta.extra.end()) entry["roles"] = nlohmann::json::parse(roles->second, nullptr, false);
        auto format = meta.extra.find("format");
        if (format != meta.extra.end()) entry["format"] = format->second;
      }
    }
    report->push_back(entry);
  } else {
    fmt::print("{} ({}) -> {}: {} scalar points, {} histograms, {} records; {} values skipped, {} damaged\n",
               source.path, stats.format, run_dir, stats.scalars, stats.tensor_stats, stats.records,
               stats.skipped_values, stats.damaged);
  }
  for (const std::string& w : stats.warnings) fmt::print(stderr, "  warning: {}\n", w);
  if (!read.ok()) {
    fmt::print(stderr, "trainscope import: {}\n", read.message());
    if (stats.points() == 0) return 2;
    fmt::print(stderr, "  kept the {} points read before the damage\n", stats.points());
  }
  return 0;
}

int ImportCommand(const std::string& src, const std::string& out, const std::string& format_name,
                  const std::vector<std::string>& role_args, const std::string& command_line, bool as_json, bool with_points) {
  ingest::ImportOptions options;
  if (!format_name.empty() && !ingest::ParseFormatName(format_name, &options.format)) {
    fmt::print(stderr,
               "trainscope import: --format {}: expected tfevents, hf_trainer_state, megatron_golden, jsonl, csv or "
               "text_log\n",
               format_name);
    return 2;
  }
  for (const std::string& r : role_args) {
    Status s = ingest::ParseRoleOverride(r, &options.roles);
    if (!s.ok()) {
      fmt::print(stderr, "trainscope import: {}\n", s.message());
      return 2;
    }
  }
  std::vector<ImportSource> sources;
  size_t considered = 0;
  std::error_code ec;
  Status s;
  if (options.format != ingest::Format::kUnknown && !fs::is_directory(src, ec)) {
    s = CheckRegularFile(src);  // before a run is made for it
    ImportSource one;
    one.path = src;
    one.name = fs::path(src).filename().string();
    one.format = options.format;
    sources.push_back(one);
  } else {
    s = ingest::FindImportSources(src, &sources, &considered);
  }
  if (!s.ok()) {
    fmt::print(stderr, "trainscope import: {}\n", s.message());
    return 2;
  }
  if (sources.empty()) {
    fmt::print(stderr,
               "trainscope import: {}: nothing to import among {} files (expected TensorBoard event files, "
               "trainer_state.json, JSONL, CSV or a training log)\n",
               src, considered);
    return 2;
  }
  nlohmann::json report = nlohmann::json::array();
  nlohmann::json* r = as_json ? &report : nullptr;
  int worst = 0;
  if (sources.size() == 1) {
    worst = ImportOne(sources[0], out, options, command_line, r, with_points);
  } else {
    for (const ImportSource& source : sources) {
      worst = std::max(worst, ImportOne(source, (fs::path(out) / SafeName(source.name)).string(), options, command_line, r, with_points));
    }
  }
  if (as_json) fmt::print("{}\n", report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  return worst;
}

}  // namespace

void AddImportCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("import", "Store a file another tool wrote (TensorBoard, Hugging Face, logs, CSV) as a run.");
  struct Args {
    std::string src, out, format;
    std::vector<std::string> roles;
    bool json = false;
    bool points = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("SRC", args->src, "An event file or logdir, trainer_state.json, JSONL, CSV or text log")->required();
  cmd->add_option("-o,--out", args->out, "Run directory to create (one per source under it for a logdir)")->required();
  cmd->add_option("--format", args->format, "Skip detection: tfevents, hf_trainer_state, megatron_golden, jsonl, csv, text_log");
  cmd->add_option("--role", args->roles, "Role map override ROLE=TAG, e.g. --role loss=train/loss (repeatable)");
  cmd->add_flag("--json", args->json, "Print what was imported as JSON: per run the series with points and steps");
  cmd->add_flag("--points", args->points, "With --json: every stored step and value too (for tests and scripts)");
  cmd->callback([args, exit_code] {
    const std::string command_line = "trainscope import " + args->src + " -o " + args->out;
    *exit_code = ImportCommand(args->src, args->out, args->format, args->roles, command_line, args->json, args->points);
  });
}

}  // namespace trainscope::cli
