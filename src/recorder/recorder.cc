#include "recorder/recorder.h"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#ifdef TRAINSCOPE_WITH_DOCTOR
#include "doctor/doctor.h"
#endif

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
  std::error_code ec;
  const bool exists = fs::exists(fs::path(run_dir) / kStoreFileName, ec);
  Status s;
  if (exists && options.resume) {
    s = RunStore::OpenForWrite(run_dir, &r->store_);
    if (s.ok()) s = r->store_->SetMetaValue("status", "running");
    if (s.ok()) s = r->store_->SetMetaValue("pid", std::to_string(getpid()));
  } else if (exists) {
    return Status::Error(run_dir + ": run '" + name + "' already exists (choose another name, or resume it)");
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
    auto online = std::make_unique<doctor::Doctor>(std::move(doctor_options));
    online->OnMeta("config", options.config_json.empty() ? "{}" : options.config_json);
    for (const auto& [key, value] : options.extra_meta) online->OnMeta(key, value);
    doctor::Doctor* raw_doctor = online.get();
    r->finish_doctor_ = [raw_doctor] { raw_doctor->Finish(); };
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
  const auto interval = std::chrono::duration<double>(flush_interval_);
  std::unique_lock lock(mu_);
  while (true) {
    wake_writer_.wait_for(lock, interval, [&] { return stopping_ || urgent_ || flush_requested_ > flush_done_; });
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
  batch.scalars.clear();
  batch.tensor_stats.clear();
  batch.vectors.clear();
  batch.spans.clear();
  batch.findings.clear();
  std::vector<std::pair<std::string, SeriesKind>> new_tags;
  std::vector<std::pair<std::string, std::string>> meta;
  {
    std::lock_guard lock(mu_);
    std::swap(batch, queue_);
    std::swap(meta, pending_meta_);
    queued_ = 0;
    for (size_t i = store_ids_.size(); i < tags_.size(); ++i) new_tags.push_back(tags_[i]);
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
  auto map_ids = [&](auto& records) {
    for (auto& r : records) r.series_id = store_ids_[static_cast<size_t>(r.series_id)];
  };
  if (doctor_thread_.joinable()) {
    DoctorWork work;
    for (const auto& [tag, kind] : new_tags) work.new_tags.push_back(tag);
    work.meta = meta;
    std::lock_guard lock(doctor_mu_);
    if (doctor_queue_.size() < kDoctorBacklog) {
      work.batch.scalars = batch.scalars;
      work.batch.tensor_stats = batch.tensor_stats;
      work.batch.vectors = batch.vectors;
      work.batch.spans = batch.spans;
    } else {
      doctor_skipped_ += batch.scalars.size() + batch.tensor_stats.size() + batch.vectors.size();
    }
    doctor_queue_.push_back(std::move(work));
    doctor_cv_.notify_one();
  }
  map_ids(batch.scalars);
  map_ids(batch.tensor_stats);
  map_ids(batch.vectors);
  if (s.ok()) s = store_->Write(batch);
  last_commit_ = now;
  if (!s.ok()) {
    const size_t lost = batch.scalars.size() + batch.tensor_stats.size() + batch.vectors.size() + batch.spans.size();
    dropped_.fetch_add(lost, std::memory_order_relaxed);
    std::lock_guard lock(mu_);
    if (writer_status_.ok()) {
      writer_status_ = s;
      std::fprintf(stderr, "trainscope: cannot write to the run store (%s); training goes on, data is dropped\n",
                   s.message().c_str());
    }
  }
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
    lock.lock();
  }
}

void Recorder::FeedDoctor(const DoctorWork& work) {
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainscope: the online doctor failed (%s); recording goes on without it\n", e.what());
    doctor_.reset();
    finish_doctor_ = nullptr;
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
  }
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
