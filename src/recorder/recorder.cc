#include "recorder/recorder.h"

#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#ifdef TRAINSCOPE_WITH_DOCTOR
#include "doctor/doctor.h"
#include "doctor/rules.h"
#endif
#ifdef TRAINSCOPE_WITH_INGEST
#include "ingest/tfevents_writer.h"
#endif

extern char** environ;

namespace trainscope {

namespace fs = std::filesystem;

namespace {

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string ReadFirstLine(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

// Run names sort by start time, as TensorBoard's do: 20261129-153012-a1b2.
std::string DefaultRunName() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
  std::random_device random;
  char suffix[8];
  std::snprintf(suffix, sizeof(suffix), "%04x", random() & 0xffff);
  return std::string(stamp) + "-" + suffix;
}

#ifdef TRAINSCOPE_WITH_DOCTOR
std::string ReplaceAll(std::string text, std::string_view from, const std::string& to) {
  for (size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size()) text.replace(at, from.size(), to);
  return text;
}

// An alert's shell command runs as `/bin/sh -c`, started with posix_spawn and its own
// environment (the process's plus TRAINSCOPE_ALERT_*): no setenv, which is unsafe while
// other threads read the environment. A detached thread waits for it, so neither the
// writer nor the training ever waits on a slow command; a failure is reported on stderr.
void StartShellAction(const doctor::Alert& alert) {
  char value[32];
  std::snprintf(value, sizeof(value), "%.6g", alert.value);
  std::string command = ReplaceAll(alert.shell, "{rule}", alert.rule);
  command = ReplaceAll(command, "{series}", alert.series);
  command = ReplaceAll(command, "{step}", std::to_string(alert.step));
  command = ReplaceAll(command, "{value}", value);
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "TRAINSCOPE_ALERT_", 17) != 0) env.emplace_back(*e);
  }
  env.push_back("TRAINSCOPE_ALERT_RULE=" + alert.rule);
  env.push_back("TRAINSCOPE_ALERT_SERIES=" + alert.series);
  env.push_back("TRAINSCOPE_ALERT_STEP=" + std::to_string(alert.step));
  env.push_back(std::string("TRAINSCOPE_ALERT_VALUE=") + value);
  env.push_back(std::string("TRAINSCOPE_ALERT_SEVERITY=") + SeverityName(alert.severity));
  std::thread([command = std::move(command), env = std::move(env), rule = alert.rule] {
    std::vector<char*> envp;
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    char* argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"), const_cast<char*>(command.c_str()), nullptr};
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv, envp.data());
    if (rc != 0) {
      std::fprintf(stderr, "trainscope: alert '%s': cannot run its shell command (%s)\n", rule.c_str(), std::strerror(rc));
      return;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "trainscope: alert '%s': its shell command failed (%s %d)\n", rule.c_str(),
                   WIFEXITED(status) ? "exit status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
  }).detach();
}
#endif

}  // namespace

std::string HostName() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

std::string GitCommit(const std::string& dir) {
  std::error_code ec;
  fs::path at = fs::absolute(dir, ec);
  for (; !at.empty(); at = at.parent_path()) {
    fs::path git = at / ".git";
    if (fs::is_regular_file(git, ec)) {  // a worktree or submodule: "gitdir: <path>"
      const std::string line = ReadFirstLine(git);
      if (line.rfind("gitdir: ", 0) != 0) return "";
      git = fs::path(line.substr(8));
      if (git.is_relative()) git = at / git;
    }
    if (fs::is_directory(git, ec)) {
      const std::string head = ReadFirstLine(git / "HEAD");
      if (head.rfind("ref: ", 0) != 0) return head;  // detached HEAD holds the hash
      const std::string ref = head.substr(5);
      std::string hash = ReadFirstLine(git / ref);
      if (!hash.empty()) return hash;
      std::ifstream packed(git / "packed-refs");
      for (std::string line; std::getline(packed, line);) {
        if (line.size() > 41 && line.compare(41, std::string::npos, ref) == 0) return line.substr(0, 40);
      }
      return "";  // a branch with no commit yet
    }
    if (at == at.root_path()) break;
  }
  return "";
}

Status Recorder::Open(const Options& options, std::unique_ptr<Recorder>* out) {
  std::unique_ptr<Recorder> r(new Recorder());
  r->flush_interval_ = options.flush_interval_seconds > 0 ? options.flush_interval_seconds : 1.0;
  r->capacity_ = options.queue_capacity ? options.queue_capacity : 1;
  std::string name = options.name.empty() ? DefaultRunName() : options.name;
  if (!options.name.empty()) {
    Status valid = ValidateRunName(options.name);
    if (!valid.ok()) return valid;
  }
  const std::string run_dir = (fs::path(options.logdir) / name).string();
  // Alert rules first: a bad rules file is the user's error, reported before a run exists.
  if (!options.alert_rules_file.empty() || !options.alert_rules_text.empty()) {
#ifdef TRAINSCOPE_WITH_DOCTOR
    std::vector<doctor::AlertRule> rules;
    Status parsed = options.alert_rules_file.empty()
                        ? doctor::ParseRules(options.alert_rules_text, options.alert_rules_origin, &rules)
                        : doctor::LoadRulesFile(options.alert_rules_file, &rules);
    if (!parsed.ok()) return parsed;
    r->alert_rule_count_ = rules.size();
    if (!rules.empty()) r->rules_ = std::make_shared<doctor::RuleEngine>(std::move(rules));
#else
    return Status::Error("alert rules need the doctor part, which this build leaves out (TRAINSCOPE_PARTS)");
#endif
  }
  std::error_code ec;
  const bool exists = fs::exists(fs::path(run_dir) / kStoreFileName, ec);
  if (exists && !options.resume) {
    return Status::Error(run_dir + ": run '" + name + "' already exists (choose another name, or resume it)");
  }
  if (options.tensorboard) {
#ifdef TRAINSCOPE_WITH_INGEST
    // A given directory is a TensorBoard logdir: each run gets its own folder in it.
    const std::string dir = options.tensorboard_dir.empty() ? (fs::path(run_dir) / "tensorboard").string()
                                                            : (fs::path(options.tensorboard_dir) / name).string();
    std::unique_ptr<ingest::TfEventsWriter> mirror;
    Status created = ingest::TfEventsWriter::Create(dir, &mirror);
    if (!created.ok()) return Status::Error("tensorboard mirror: " + created.message());
    r->tensorboard_path_ = mirror->path();
    r->mirror_ = std::move(mirror);
#else
    return Status::Error("tensorboard=: the TensorBoard mirror needs the ingest part, which this build leaves out "
                         "(TRAINSCOPE_PARTS)");
#endif
  }
  Status s;
  if (exists && options.resume) {
    s = RunStore::OpenForWrite(run_dir, &r->store_);
    if (s.ok()) s = r->store_->SetMetaValue("status", "running");
    if (s.ok()) s = r->store_->SetMetaValue("pid", std::to_string(getpid()));
  } else {
    RunMeta meta;
    meta.name = name;
    meta.start_time = WallNow();
    meta.heartbeat = meta.start_time;
    meta.host = HostName();
    meta.pid = getpid();
    meta.config_json = options.config_json.empty() ? "{}" : options.config_json;
    meta.command_line = options.command_line;
    meta.git_commit = GitCommit(".");
    meta.status = "running";
    meta.extra = options.extra_meta;
    s = RunStore::Create(run_dir, meta, &r->store_);
  }
  if (!s.ok()) return s;
  r->run_dir_ = run_dir;
  r->name_ = name;
#ifdef TRAINSCOPE_WITH_DOCTOR
  if (options.online_doctor) {
    doctor::DoctorOptions doctor_options;
    Recorder* self = r.get();
    doctor_options.on_finding = [self](const Finding& f) { self->OnDoctorFinding(f); };
    // FeedDoctor hands over a batch grouped by kind (scalars, then tensor statistics, ...):
    // steps are judged at the batch's end, when all their samples are in.
    doctor_options.judge_at_batch_end = true;
    auto online = std::make_unique<doctor::Doctor>(std::move(doctor_options));
    online->OnMeta("config", options.config_json.empty() ? "{}" : options.config_json);
    for (const auto& [key, value] : options.extra_meta) online->OnMeta(key, value);
    doctor::Doctor* raw_doctor = online.get();
    r->finish_doctor_ = [raw_doctor] { raw_doctor->Finish(); };
    r->end_batch_doctor_ = [raw_doctor] { raw_doctor->EndBatch(); };
    r->doctor_findings_ = [raw_doctor] { return raw_doctor->findings(); };
    r->doctor_ = std::move(online);
    r->doctor_thread_ = std::thread([self] { self->DoctorLoop(); });
  }
#endif
  r->last_commit_ = WallNow();
  Recorder* raw = r.get();
  r->writer_ = std::thread([raw] { raw->WriterLoop(); });
  *out = std::move(r);
  return Status::Ok();
}

Status ValidateRunName(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return Status::Error("invalid run name '" + name + "': expected 1-255 characters, no '/', not '.' or '..'");
  }
  return Status::Ok();
}

Recorder::~Recorder() {
  Close("finished", "");
}

// Points get the coarse wall clock (a few ms resolution, ~5 ns a read instead of ~25):
// the step orders points, the wall time only places them on a time axis.
double Recorder::Now() const {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

bool Recorder::QueueFull() const { return queued_ >= capacity_; }

uint32_t Recorder::InternLocked(std::string_view tag, SeriesKind kind, Status* status) {
  auto it = ids_.find(tag);
  if (it != ids_.end()) {
    if (tags_[it->second].second != kind) {
      *status = Status::Error("series '" + std::string(tag) + "' holds " + SeriesKindName(tags_[it->second].second) +
                              " data, cannot log " + SeriesKindName(kind) + " data to it");
    }
    return it->second;
  }
  *status = ValidateTag(tag);
  if (!status->ok()) return 0;
  const uint32_t id = static_cast<uint32_t>(tags_.size());
  tags_.emplace_back(std::string(tag), kind);
  ids_.emplace(std::string(tag), id);
  return id;
}

Status Recorder::Series(std::string_view tag, SeriesKind kind, uint32_t* id) {
  std::lock_guard lock(mu_);
  Status s;
  *id = InternLocked(tag, kind, &s);
  return s;
}

void Recorder::LogScalar(uint32_t id, int64_t step, double value) {
  const double now = Now();
  std::lock_guard lock(mu_);
  if (QueueFull()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queue_.scalars.push_back({id, step, now, value});
  ++queued_;
}

void Recorder::LogNamedScalars(const std::vector<std::pair<std::string_view, double>>& values, int64_t step,
                               std::vector<std::string>* rejected) {
  const double now = Now();
  std::lock_guard lock(mu_);
  for (const auto& [tag, value] : values) {
    Status s;
    const uint32_t id = InternLocked(tag, SeriesKind::kScalar, &s);
    if (!s.ok()) {
      if (rejected && rejected_tags_.insert(std::string(tag.substr(0, 200))).second) rejected->push_back(s.message());
      continue;
    }
    if (QueueFull()) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    queue_.scalars.push_back({id, step, now, value});
    ++queued_;
  }
}

void Recorder::LogTensorStats(uint32_t id, int64_t step, const TensorStats& stats) {
  const double now = Now();
  std::lock_guard lock(mu_);
  if (QueueFull()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queue_.tensor_stats.push_back({id, step, now, stats});
  ++queued_;
  // A TensorStats is ~1.1 KB: past kEarlyWriteStats queued, write now instead of at the
  // interval, so the queue and the buffers recycled after it stay a few MB at any rate.
  if (queue_.tensor_stats.size() == kEarlyWriteStats) {
    urgent_ = true;
    wake_writer_.notify_one();
  }
}

void Recorder::LogVector(uint32_t id, int64_t step, std::vector<float> values) {
  const double now = Now();
  std::lock_guard lock(mu_);
  if (QueueFull()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queued_ += 1;
  queue_.vectors.push_back({id, step, now, std::move(values)});
}

void Recorder::LogSpan(Span span) {
  std::lock_guard lock(mu_);
  if (QueueFull()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queue_.spans.push_back(std::move(span));
  ++queued_;
}

void Recorder::AddFinding(Finding finding) {
  std::lock_guard lock(mu_);
  // Findings are never dropped: they are few, and they are what the user came for.
  const bool critical = finding.severity == Severity::kCritical;
  queue_.findings.push_back(std::move(finding));
  ++queued_;
  if (critical) {
    urgent_ = true;
    wake_writer_.notify_one();
  }
}

void Recorder::SetMeta(std::string key, std::string value) {
  std::lock_guard lock(mu_);
  pending_meta_.emplace_back(std::move(key), std::move(value));
}

void Recorder::Flush() {
  std::unique_lock lock(mu_);
  if (closed_ || !writer_.joinable()) return;
  const uint64_t ticket = ++flush_requested_;
  wake_writer_.notify_one();
  flushed_cv_.wait(lock, [&] { return flush_done_ >= ticket || stopping_; });
}

Status Recorder::writer_status() const {
  std::lock_guard lock(mu_);
  return writer_status_;
}

void Recorder::WriterLoop() {
  using Clock = std::chrono::steady_clock;
  const auto interval = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(flush_interval_));
  // With alert rules the writer also wakes every kRuleTick to judge what is queued, so an
  // alert waits for a tick, not for the next commit.
  const bool ticking = rules_ != nullptr && flush_interval_ > kRuleTick;
  const auto wait = ticking ? std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kRuleTick))
                            : interval;
  auto next_write = Clock::now() + interval;
  std::unique_lock lock(mu_);
  while (true) {
    const bool woken =
        wake_writer_.wait_for(lock, wait, [&] { return stopping_ || urgent_ || flush_requested_ > flush_done_; });
    if (!woken && ticking && Clock::now() < next_write) {
      lock.unlock();
      PeekRules();
      lock.lock();
      continue;
    }
    next_write = Clock::now() + interval;
    const uint64_t ticket = flush_requested_;
    const bool stop = stopping_;
    urgent_ = false;
    lock.unlock();
    WriteOnce();
    lock.lock();
    flush_done_ = ticket;
    flushed_cv_.notify_all();
    if (stop) break;
  }
}

void Recorder::WriteOnce() {
  // The batch drained last time, emptied but with its capacity, becomes the new queue:
  // the training thread does not regrow a vector after every flush.
  WriteBatch& batch = recycled_;
  if (batch.scalars.capacity() == 0) {  // handed to the doctor last time: take a judged one
    std::lock_guard lock(doctor_mu_);
    if (!spare_batches_.empty()) {
      batch = std::move(spare_batches_.back());
      spare_batches_.pop_back();
    }
  }
  batch.scalars.clear();
  batch.tensor_stats.clear();
  batch.vectors.clear();
  batch.spans.clear();
  batch.findings.clear();
  std::vector<std::pair<std::string, SeriesKind>> new_tags;
  std::vector<std::pair<std::string, std::string>> meta;
  size_t rules_seen_scalars = 0, rules_seen_stats = 0;
  {
    std::lock_guard lock(mu_);
    std::swap(batch, queue_);
    std::swap(meta, pending_meta_);
    queued_ = 0;
    for (size_t i = store_ids_.size(); i < tags_.size(); ++i) new_tags.push_back(tags_[i]);
    SyncWriterTagsLocked();
    rules_seen_scalars = rule_seen_scalars_;
    rules_seen_stats = rule_seen_stats_;
    rule_seen_scalars_ = rule_seen_stats_ = 0;
  }
  if (rules_) {
    // What the ticks have not judged yet; the findings of alerts go into this commit.
    std::vector<WriteBatch::ScalarPoint> scalars;
    std::vector<WriteBatch::StatsPoint> stats;
    for (size_t i = rules_seen_scalars; i < batch.scalars.size(); ++i) {
      if (rule_watched_[batch.scalars[i].series_id]) scalars.push_back(batch.scalars[i]);
    }
    for (size_t i = rules_seen_stats; i < batch.tensor_stats.size(); ++i) {
      if (rule_watched_[batch.tensor_stats[i].series_id]) stats.push_back(batch.tensor_stats[i]);
    }
    const size_t before = batch.findings.size();
    if (!scalars.empty() || !stats.empty()) JudgeRules(scalars, stats, &batch.findings);
    if (batch.findings.size() > before) {
      std::lock_guard lock(mu_);
      live_findings_.insert(live_findings_.end(), batch.findings.begin() + static_cast<std::ptrdiff_t>(before),
                            batch.findings.end());
    }
  }
  const double now = WallNow();
  // An idle run still writes a heartbeat every few seconds so readers can tell it lives.
  if (batch.empty() && new_tags.empty() && meta.empty() && now - last_commit_ < 5.0) return;
  Status s;
  for (const auto& [key, value] : meta) {
    if (s.ok()) s = store_->SetMetaValue(key, value);
  }
  for (const auto& [tag, kind] : new_tags) {
    int64_t store_id = -1;
    if (s.ok()) s = store_->EnsureSeries(tag, kind, &store_id);
    store_ids_.push_back(store_id);
  }
  // The store wants its own series ids, the doctor and the mirror the recorder's: the ids
  // are swapped in for the write and back after it, so the doctor can take the batch
  // itself rather than a copy.
  std::vector<int64_t> recorder_ids;
  auto map_ids = [&](auto& records) {
    for (auto& r : records) {
      recorder_ids.push_back(r.series_id);
      r.series_id = store_ids_[static_cast<size_t>(r.series_id)];
    }
  };
  auto unmap_ids = [&](auto& records, size_t* at) {
    for (auto& r : records) r.series_id = recorder_ids[(*at)++];
  };
  if (mirror_ && !mirror_failed_) WriteMirror(batch);
  recorder_ids.reserve(batch.scalars.size() + batch.tensor_stats.size() + batch.vectors.size());
  map_ids(batch.scalars);
  map_ids(batch.tensor_stats);
  map_ids(batch.vectors);
  if (s.ok()) s = store_->Write(batch);
  last_commit_ = now;
  const size_t written = batch.scalars.size() + batch.tensor_stats.size() + batch.vectors.size() + batch.spans.size();
  if (doctor_thread_.joinable()) {
    size_t at = 0;
    unmap_ids(batch.scalars, &at);
    unmap_ids(batch.tensor_stats, &at);
    unmap_ids(batch.vectors, &at);
    DoctorWork work;
    for (const auto& [tag, kind] : new_tags) work.new_tags.push_back(tag);
    work.meta = meta;
    std::lock_guard lock(doctor_mu_);
    if (doctor_queue_.size() < kDoctorBacklog) {
      work.batch = std::move(batch);
      work.batch.findings.clear();  // the doctor's own and the client's: not re-judged
      batch = WriteBatch{};          // the writer takes a judged one next time
    } else {
      doctor_skipped_ += batch.scalars.size() + batch.tensor_stats.size() + batch.vectors.size();
    }
    doctor_queue_.push_back(std::move(work));
    doctor_cv_.notify_one();
  }
  if (!s.ok()) {
    dropped_.fetch_add(written, std::memory_order_relaxed);
    std::lock_guard lock(mu_);
    if (writer_status_.ok()) {
      writer_status_ = s;
      std::fprintf(stderr, "trainscope: cannot write to the run store (%s); training goes on, data is dropped\n",
                   s.message().c_str());
    }
  }
}

void Recorder::SyncWriterTagsLocked() {
  for (size_t i = writer_tags_.size(); i < tags_.size(); ++i) {
    writer_tags_.push_back(tags_[i].first);
    bool watched = false;
#ifdef TRAINSCOPE_WITH_DOCTOR
    if (rules_) {
      for (const doctor::AlertRule& rule : rules_->rules()) watched = watched || doctor::SeriesMatches(rule.series, tags_[i].first);
    }
#endif
    rule_watched_.push_back(watched ? 1 : 0);
  }
}

// Between commits: judge the part of the queue no tick has seen, copying under mu_ only the
// points of series some rule matches (a scan of what 50 ms of logging queued).
void Recorder::PeekRules() {
  std::vector<WriteBatch::ScalarPoint> scalars;
  std::vector<WriteBatch::StatsPoint> stats;
  {
    std::lock_guard lock(mu_);
    SyncWriterTagsLocked();
    for (size_t i = rule_seen_scalars_; i < queue_.scalars.size(); ++i) {
      if (rule_watched_[queue_.scalars[i].series_id]) scalars.push_back(queue_.scalars[i]);
    }
    for (size_t i = rule_seen_stats_; i < queue_.tensor_stats.size(); ++i) {
      if (rule_watched_[queue_.tensor_stats[i].series_id]) stats.push_back(queue_.tensor_stats[i]);
    }
    rule_seen_scalars_ = queue_.scalars.size();
    rule_seen_stats_ = queue_.tensor_stats.size();
  }
  if (scalars.empty() && stats.empty()) return;
  std::vector<Finding> findings;
  JudgeRules(scalars, stats, &findings);
  if (findings.empty()) return;
  std::lock_guard lock(mu_);
  for (Finding& f : findings) {
    live_findings_.push_back(f);
    queue_.findings.push_back(std::move(f));  // stored with the next write
    ++queued_;
  }
}

void Recorder::JudgeRules(const std::vector<WriteBatch::ScalarPoint>& scalars,
                          const std::vector<WriteBatch::StatsPoint>& stats, std::vector<Finding>* findings) {
#ifdef TRAINSCOPE_WITH_DOCTOR
  for (const auto& p : scalars) rules_->OnScalar(writer_tags_[p.series_id], p.step, p.wall_time, p.value);
  for (const auto& p : stats) rules_->OnTensorStats(writer_tags_[p.series_id], p.step, p.wall_time, p.stats);
  std::vector<doctor::Alert> fired = rules_->TakeAlerts();
  if (fired.empty()) return;
  std::vector<RuleAlert> alerts;
  for (doctor::Alert& a : fired) {
    findings->push_back(doctor::AlertToFinding(a));
    if (!a.shell.empty()) StartShellAction(a);
    alerts.push_back({std::move(a.rule), std::move(a.series), a.severity, a.step, a.value, std::move(a.message),
                      std::move(a.actions), std::move(a.callback), std::move(a.shell)});
  }
  std::lock_guard lock(alert_mu_);
  for (RuleAlert& a : alerts) alerts_.push_back(std::move(a));
  alerts_pending_.store(true, std::memory_order_release);
#endif
}

std::vector<RuleAlert> Recorder::TakeAlerts(int64_t before_step) {
  std::vector<RuleAlert> taken, kept;
  std::lock_guard lock(alert_mu_);
  for (RuleAlert& a : alerts_) (a.step < before_step ? taken : kept).push_back(std::move(a));
  alerts_.swap(kept);
  alerts_pending_.store(!alerts_.empty(), std::memory_order_release);
  return taken;
}

// The mirror gets what the store gets, in logged order, and is flushed with each commit so
// `tensorboard --logdir` sees the run while it trains. A failure stops the mirror only.
void Recorder::WriteMirror(const WriteBatch& batch) {
#ifdef TRAINSCOPE_WITH_INGEST
  Status s;
  for (const auto& p : batch.scalars) {
    if (s.ok()) s = mirror_->AddScalar(writer_tags_[p.series_id], p.step, p.wall_time, p.value);
  }
  for (const auto& p : batch.tensor_stats) {
    // Only statistics with their exponent histogram make a TensorBoard histogram.
    if (s.ok() && p.stats.has_histogram) s = mirror_->AddHistogram(writer_tags_[p.series_id], p.step, p.wall_time, p.stats);
  }
  if (s.ok()) s = mirror_->Flush();
  if (!s.ok()) {
    mirror_failed_ = true;
    std::fprintf(stderr, "trainscope: the TensorBoard mirror stopped (%s); the run's store goes on\n",
                 s.message().c_str());
  }
#endif
}

// The doctor sees what the training logged, after it is stored, on its own thread: the
// training thread never waits for a judgement and neither does the store. A doctor
// failure turns the doctor off, never the recording.
void Recorder::DoctorLoop() {
  // Lower priority than the training and the writer: judging may lag, storing may not.
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  std::unique_lock lock(doctor_mu_);
  while (true) {
    doctor_cv_.wait(lock, [&] { return doctor_stop_ || !doctor_queue_.empty(); });
    if (doctor_queue_.empty()) break;  // stopping, and everything was judged
    DoctorWork work = std::move(doctor_queue_.front());
    doctor_queue_.pop_front();
    lock.unlock();
    FeedDoctor(work);
    WriteBatch& spent = work.batch;
    spent.scalars.clear();
    spent.tensor_stats.clear();
    spent.vectors.clear();
    spent.spans.clear();
    lock.lock();
    if (spare_batches_.size() < 2 && spent.scalars.capacity() > 0) spare_batches_.push_back(std::move(spent));
  }
}

void Recorder::FeedDoctor(DoctorWork& work) {
  for (const std::string& tag : work.new_tags) doctor_tags_.push_back(tag);
  if (!doctor_) return;
  try {
    for (const auto& [key, value] : work.meta) doctor_->OnMeta(key, value);
    const WriteBatch& batch = work.batch;
    for (const auto& p : batch.scalars) doctor_->OnScalar(doctor_tags_[p.series_id], p.step, p.wall_time, p.value);
    for (const auto& p : batch.tensor_stats) {
      doctor_->OnTensorStats(doctor_tags_[p.series_id], p.step, p.wall_time, p.stats);
    }
    for (const auto& v : batch.vectors) doctor_->OnVector(doctor_tags_[v.series_id], v.step, v.wall_time, v.values);
    for (const auto& span : batch.spans) doctor_->OnSpan(span);
    if (end_batch_doctor_) end_batch_doctor_();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainscope: the online doctor failed (%s); recording goes on without it\n", e.what());
    doctor_.reset();
    finish_doctor_ = nullptr;
    end_batch_doctor_ = nullptr;
    doctor_findings_ = nullptr;
  }
}

void Recorder::OnDoctorFinding(const Finding& f) {
  std::fprintf(stderr, "trainscope: [%s] %s at step %lld%s%s: %s\n", SeverityName(f.severity), f.code.c_str(),
               static_cast<long long>(f.step), f.location.empty() ? "" : " in ", f.location.c_str(),
               f.summary.c_str());
  std::lock_guard lock(mu_);
  live_findings_.push_back(f);
  queue_.findings.push_back(f);  // stored with the next write
  ++queued_;
  if (f.severity == Severity::kCritical) {
    urgent_ = true;
    wake_writer_.notify_one();
  }
}

std::vector<Finding> Recorder::live_findings() const {
  std::lock_guard lock(mu_);
  return live_findings_;
}

Status Recorder::Close(const std::string& status, const std::string& exit_reason) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return writer_status_;
    closed_ = true;
    stopping_ = true;
    wake_writer_.notify_one();
  }
  if (writer_.joinable()) writer_.join();
  if (!store_) return Status::Ok();  // Open failed: nothing was started
  if (doctor_thread_.joinable()) {
    {
      std::lock_guard lock(doctor_mu_);
      doctor_stop_ = true;
      doctor_cv_.notify_one();
    }
    doctor_thread_.join();  // it judges what is queued first
    if (doctor_skipped_) {
      std::fprintf(stderr, "trainscope: the online doctor skipped %llu samples to keep up; "
                   "`trainscope diagnose` judges them all\n", static_cast<unsigned long long>(doctor_skipped_));
    }
  }
  if (finish_doctor_) {
    // The last steps and the end-of-run checks; their findings are written below.
    try {
      finish_doctor_();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trainscope: the online doctor failed at the end (%s)\n", e.what());
    }
    finish_doctor_ = nullptr;
    WriteOnce();  // the writer thread has stopped: this thread writes
    if (doctor_findings_) {
      // Findings were stored when they opened; write their final state (a spike that kept
      // going, a warning that became critical) over those rows, and into run.findings.
      const std::vector<Finding> final_state = doctor_findings_();
      Status updated = store_->UpdateFindings(final_state);
      if (!updated.ok()) std::fprintf(stderr, "trainscope: %s\n", updated.message().c_str());
      std::lock_guard lock(mu_);
      for (Finding& live : live_findings_) {
        for (const Finding& f : final_state) {
          if (f.code == live.code && f.location == live.location && f.step == live.step) live = f;
        }
      }
    }
  }
#ifdef TRAINSCOPE_WITH_INGEST
  if (mirror_) {
    Status closed = mirror_->Close();
    if (!closed.ok() && !mirror_failed_) std::fprintf(stderr, "trainscope: %s\n", closed.message().c_str());
    mirror_.reset();
  }
#endif
  if (dropped() > 0) {
    std::fprintf(stderr, "trainscope: %llu points were dropped (the queue was full or the store failed)\n",
                 static_cast<unsigned long long>(dropped()));
    store_->SetMetaValue("dropped_points", std::to_string(dropped()));
  }
  Status s = store_->Close(status, exit_reason);
  store_.reset();
  std::lock_guard lock(mu_);
  return writer_status_.ok() ? s : writer_status_;
}

}  // namespace trainscope
