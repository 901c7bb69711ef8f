#include "recorder/recorder.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

namespace trainscope {

namespace fs = std::filesystem;

namespace {

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

std::string ThisHost() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

constexpr size_t kMaxKeptFindings = 10000;

double Recorder::WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Status Recorder::Open(const Options& options, std::unique_ptr<Recorder>* out) {
  std::unique_ptr<Recorder> r(new Recorder());
  r->flush_interval_ = options.flush_interval_seconds > 0 ? options.flush_interval_seconds : 1.0;
  r->retry_interval_ = options.store_retry_seconds > 0 ? options.store_retry_seconds : 5.0;
  r->max_store_bytes_ = options.max_store_bytes;
  r->capacity_ = options.queue_capacity ? options.queue_capacity : 1;
  std::string name = options.name.empty() ? DefaultRunName() : options.name;
  if (!options.name.empty()) {
    Status valid = ValidateRunName(options.name);
    if (!valid.ok()) return valid;
  }
  const std::string run_dir = (fs::path(options.logdir) / name).string();
  std::error_code ec;
  const bool exists = fs::exists(fs::path(run_dir) / kStoreFileName, ec);
  if (exists && !options.resume) {
    return Status::InvalidArgument(run_dir + ": run '" + name + "' already exists (choose another name, or resume it)");
  }
  // The observers come first: one that cannot start (a mirror's folder not writable) fails
  // Open before a run exists.
  const std::string config_json = options.config_json.empty() ? "{}" : options.config_json;
  const RunStart start{run_dir, name, config_json, options.extra_meta, exists && options.resume};
  for (const auto& observer : options.observers) {
    if (!observer) continue;
    Status opened = observer->OnOpen(start, r->host_);
    if (!opened.ok()) return opened;
    r->observers_.push_back(observer);
    if (observer->ticks()) r->ticked_.push_back({observer.get(), {}, {}, {}});
  }
  for (const auto& observer : r->observers_) {
    if (!observer->takes_batches()) r->commit_order_.push_back(observer.get());
  }
  for (const auto& observer : r->observers_) {
    if (observer->takes_batches()) r->commit_order_.push_back(observer.get());
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
    meta.host = options.host.empty() ? ThisHost() : options.host;
    meta.pid = getpid();
    meta.config_json = config_json;
    meta.command_line = options.command_line;
    meta.git_commit = options.git_commit;
    meta.status = "running";
    meta.extra = options.extra_meta;
    std::string fault;
    s = RunStore::Create(run_dir, meta, &r->store_, &fault);
    if (!s.ok() && s.IsIOError()) {
      // A disk full (or read-only) from the start: the training goes on unmonitored, and the
      // writer tries to create the store again every store_retry_seconds.
      std::fprintf(stderr,
                   "trainscope: cannot create the run store (%s; %s); training goes on unmonitored, data is "
                   "dropped and counted; trying again every %g s\n",
                   s.message().c_str(), fault.c_str(), r->retry_interval_);
      r->create_meta_ = meta;
      r->store_failing_ = true;
      r->fault_cause_ = fault;
      r->writer_status_ = s;
      r->next_retry_ = WallNow() + r->retry_interval_;
      s = Status::Ok();
    }
  }
  if (s.ok() && r->store_ && r->max_store_bytes_ > 0) s = r->store_->LimitFileSize(r->max_store_bytes_);
  if (!s.ok()) return s;
  r->run_dir_ = run_dir;
  r->name_ = name;
  if (r->store_) r->HoldReserve();
  r->last_commit_ = WallNow();
  Recorder* raw = r.get();
  r->writer_ = std::thread([raw] { raw->WriterLoop(); });
  *out = std::move(r);
  return Status::Ok();
}

Status ValidateRunName(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return Status::InvalidArgument("invalid run name '" + name + "': expected 1-255 characters, no '/', not '.' or '..'");
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
      *status = Status::InvalidArgument("series '" + std::string(tag) + "' holds " + SeriesKindName(tags_[it->second].second) +
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
    queue_full_drops_.fetch_add(1, std::memory_order_relaxed);
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
      queue_full_drops_.fetch_add(1, std::memory_order_relaxed);
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
    queue_full_drops_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queued_stats_.Add(id, step, now, stats);
  ++queued_;
  // A TensorStats is ~1.1 KB in the writer's batch: past kEarlyWriteStats queued, write now
  // instead of at the interval, so the queue and the buffers recycled after it stay a few MB
  // at any rate.
  if (queued_stats_.points.size() == kEarlyWriteStats) {
    urgent_ = true;
    wake_writer_.notify_one();
  }
}

void Recorder::QueuedStats::Add(uint32_t id, int64_t step, double wall_time, const TensorStats& stats) {
  uint32_t histogram = 0;
  if (stats.has_histogram) {
    histograms.push_back(stats.exponent_counts);
    histogram = static_cast<uint32_t>(histograms.size());
  }
  points.push_back({id, histogram, step, wall_time, stats});
}

WriteBatch::StatsPoint Recorder::QueuedStats::Expand(size_t i) const {
  const Point& p = points[i];
  WriteBatch::StatsPoint out{p.series_id, p.step, p.wall_time, {}};
  static_cast<TensorStatsSummary&>(out.stats) = p.summary;
  if (p.histogram) out.stats.exponent_counts = histograms[p.histogram - 1];
  return out;
}

void Recorder::LogVector(uint32_t id, int64_t step, std::vector<float> values) {
  const double now = Now();
  std::lock_guard lock(mu_);
  if (QueueFull()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    queue_full_drops_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queued_ += 1;
  queue_.vectors.push_back({id, step, now, std::move(values)});
}

void Recorder::LogSpan(Span span) {
  std::lock_guard lock(mu_);
  if (QueueFull()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    queue_full_drops_.fetch_add(1, std::memory_order_relaxed);
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

void Recorder::DropBatch(const WriteBatch& batch, std::vector<std::pair<std::string, std::string>>* meta,
                         const std::string& cause) {
  const uint64_t points = batch.scalars.size() + batch.tensor_stats.size() + batch.vectors.size() + batch.spans.size();
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  auto span_of = [&](const auto& records) {
    for (const auto& r : records) {
      lo = std::min(lo, r.step);
      hi = std::max(hi, r.step);
    }
  };
  span_of(batch.scalars);
  span_of(batch.tensor_stats);
  span_of(batch.vectors);
  span_of(batch.spans);
  // Meta is never dropped (a later value of a key replaces a kept one); findings are few
  // and what the user came for: both wait for the next write that succeeds.
  for (auto& [key, value] : *meta) {
    auto it = std::find_if(unwritten_meta_.begin(), unwritten_meta_.end(), [&](const auto& kv) { return kv.first == key; });
    if (it != unwritten_meta_.end()) it->second = std::move(value);
    else unwritten_meta_.emplace_back(std::move(key), std::move(value));
  }
  for (const Finding& f : batch.findings) {
    if (unwritten_findings_.size() < kMaxKeptFindings) unwritten_findings_.push_back(f);
  }
  if (points == 0) return;
  dropped_.fetch_add(points, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  store_drops_[cause] += points;
  if (gap_open_ && gaps_.back().cause == cause) {
    gaps_.back().first_step = std::min(gaps_.back().first_step, lo);
    gaps_.back().last_step = std::max(gaps_.back().last_step, hi);
  } else {
    gaps_.push_back({lo, hi, cause});
    gap_open_ = true;
  }
}

std::map<std::string, uint64_t> Recorder::drops() const {
  std::map<std::string, uint64_t> out;
  {
    std::lock_guard lock(mu_);
    out = store_drops_;
  }
  const uint64_t queue_full = queue_full_drops_.load(std::memory_order_relaxed);
  if (queue_full) out["queue full"] += queue_full;
  return out;
}

std::vector<Recorder::Gap> Recorder::gaps() const {
  std::lock_guard lock(mu_);
  return gaps_;
}

std::vector<RuleAlert> Recorder::TakeAlerts(int64_t before_step) {
  std::vector<RuleAlert> taken, kept;
  std::lock_guard lock(alert_mu_);
  for (RuleAlert& a : alerts_) (a.step < before_step ? taken : kept).push_back(std::move(a));
  alerts_.swap(kept);
  alerts_pending_.store(!alerts_.empty(), std::memory_order_release);
  return taken;
}

void Recorder::Host::AddLiveFinding(Finding f) {
  Recorder& r = *recorder_;
  std::lock_guard lock(r.mu_);
  const bool critical = f.severity == Severity::kCritical;
  r.live_findings_.push_back(f);
  r.queue_.findings.push_back(std::move(f));  // stored with the next write
  ++r.queued_;
  if (critical) {
    r.urgent_ = true;
    r.wake_writer_.notify_one();
  }
}

void Recorder::Host::PostAlert(RuleAlert alert) {
  Recorder& r = *recorder_;
  std::lock_guard lock(r.alert_mu_);
  r.alerts_.push_back(std::move(alert));
  r.alerts_pending_.store(true, std::memory_order_release);
}

void Recorder::Host::RecycleBatch(WriteBatch batch) {
  batch.scalars.clear();
  batch.tensor_stats.clear();
  batch.vectors.clear();
  batch.spans.clear();
  batch.findings.clear();
  // A spare keeps its vectors' capacity (no reallocation next flush), but not one a burst grew
  // past kMaxSpareBytes: that memory goes back.
  const size_t capacity = batch.scalars.capacity() * sizeof(WriteBatch::ScalarPoint) +
                          batch.tensor_stats.capacity() * sizeof(WriteBatch::StatsPoint);
  if (capacity > kMaxSpareBytes) return;
  Recorder& r = *recorder_;
  std::lock_guard lock(r.spare_mu_);
  if (r.spare_batches_.size() < 2 && batch.scalars.capacity() > 0) r.spare_batches_.push_back(std::move(batch));
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
  if (run_dir_.empty()) return Status::Ok();  // Open failed: nothing was started
  if (!observers_.empty()) {
    // The observers finish (the online doctor judges its backlog, the last steps and the
    // end-of-run checks); the findings they add are written below, then their final state
    // over the rows stored when the findings opened (a spike that kept going, a warning
    // that became critical), and into run.findings.
    std::vector<Finding> final_state;
    for (const auto& observer : observers_) observer->OnClose(&final_state);
    observers_closed_ = true;
    WriteOnce(/*last=*/true);  // the writer thread has stopped: this thread writes
    if (!final_state.empty() && store_ && !store_failing_) {
      Status updated = store_->UpdateFindings(final_state);
      if (!updated.ok()) std::fprintf(stderr, "trainscope: %s\n", updated.message().c_str());
    }
    if (!final_state.empty()) {
      std::lock_guard lock(mu_);
      for (Finding& live : live_findings_) {
        for (const Finding& f : final_state) {
          if (f.code == live.code && f.location == live.location && f.step == live.step) live = f;
        }
      }
    }
  } else if (store_failing_) {
    WriteOnce(/*last=*/true);  // a last try, with the space held back
  }
  Status s = Status::Ok();
  if (store_) {
    // What was lost and why goes with the run's end, in its one commit (the client prints
    // the one count), with the meta a failing store kept back.
    std::vector<std::pair<std::string, std::string>> end_meta;
    std::swap(end_meta, unwritten_meta_);
    {
      std::lock_guard lock(mu_);
      if (dropped() > 0) {
        end_meta.emplace_back("dropped_points", std::to_string(dropped()));
        end_meta.emplace_back("drops", DropsJsonLocked());
      }
      if (!gaps_.empty()) end_meta.emplace_back("gaps", GapsJsonLocked());
    }
    s = store_->Close(status, exit_reason, end_meta);
    // A disk that filled again at the very end: the space held back is for this (the end's
    // few WAL frames), released before anything else is tried.
    if (!s.ok() && !reserve_path_.empty()) {
      ReleaseReserve();
      s = store_->Close(status, exit_reason, end_meta);
    }
    // A WAL at a file size limit: folded into the file, it is written again from its start.
    if (!s.ok() && store_->Checkpoint().ok()) s = store_->Close(status, exit_reason, end_meta);
    if (!s.ok()) {
      std::fprintf(stderr, "trainscope: could not mark the run %s in its store (%s); readers will call it crashed\n",
                   status.c_str(), s.message().c_str());
    } else if (!unwritten_findings_.empty()) {
      WriteBatch kept;
      kept.findings = std::move(unwritten_findings_);
      Status written = store_->Write(kept);
      if (!written.ok()) {
        std::fprintf(stderr, "trainscope: %zu findings could not be stored (%s); run.findings has them\n",
                     kept.findings.size(), written.message().c_str());
      }
    }
    store_.reset();
  }
  ReleaseReserve();
  std::lock_guard lock(mu_);
  return writer_status_.ok() ? s : writer_status_;
}

}  // namespace trainscope
