// The recorder's writer thread: commits what the training thread queued to the store once a
// flush interval, lives through store faults (a reserve file for the last commit on a full
// disk, retries, drops and gaps counted) and hands the observers that tick (the online
// doctor, alert rules) the points of the series they watch between commits.
#include "recorder/recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

namespace trainscope {

namespace fs = std::filesystem;

namespace {

// Space held back beside the store on a full disk: released at Close, it lets the run be
// marked ended (status, drops, gaps: a few WAL frames).
constexpr off_t kReserveBytes = 256 * 1024;

}  // namespace

void Recorder::WriterLoop() {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  // What a kill loses is what waits for the next commit plus the commit under way: at most
  // the gap between commits plus two commit times. The gap shrinks by twice the last
  // commit's time, so that a heavy logger (1,000 values a step: commits of a few hundred ms
  // on a loaded machine) still loses at most flush_interval_ (issue 28).
  double last_write = 0;
  auto gap = [&] { return seconds(std::max(kMinFlushGap, flush_interval_ - 2 * last_write)); };
  // With ticked observers (alert rules) the writer also wakes every kRuleTick to hand them
  // what is queued, so an alert waits for a tick, not for the next commit.
  const bool ticking = !ticked_.empty() && flush_interval_ > kRuleTick;
  auto next_write = Clock::now() + gap();
  std::unique_lock lock(mu_);
  while (true) {
    const auto until = ticking ? std::min(next_write, Clock::now() + seconds(kRuleTick)) : next_write;
    const bool woken =
        wake_writer_.wait_until(lock, until, [&] { return stopping_ || urgent_ || flush_requested_ > flush_done_; });
    if (!woken && Clock::now() < next_write) {
      if (ticking) {
        lock.unlock();
        Tick();
        lock.lock();
      }
      continue;
    }
    const uint64_t ticket = flush_requested_;
    const bool stop = stopping_;
    urgent_ = false;
    lock.unlock();
    const auto started = Clock::now();
    WriteOnce(stop);
    const auto ended = Clock::now();
    last_write = std::chrono::duration<double>(ended - started).count();
    next_write = ended + gap();
    lock.lock();
    flush_done_ = ticket;
    flushed_cv_.notify_all();
    if (stop) break;
  }
}

void Recorder::WriteOnce(bool last) {
  // The batch drained last time, emptied but with its capacity, becomes the new queue:
  // the training thread does not regrow a vector after every flush.
  WriteBatch& batch = recycled_;
  if (batch.scalars.capacity() == 0) {  // an observer took it over last time: take one given back
    std::lock_guard lock(spare_mu_);
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
  const bool observed = !observers_closed_ && !observers_.empty();
  std::vector<std::pair<std::string, std::string>> meta;
  size_t tick_seen_scalars = 0, tick_seen_stats = 0;
  const size_t first_new_tag = store_ids_.size();
  {
    std::lock_guard lock(mu_);
    std::swap(batch, queue_);
    // The statistics queue in queued_stats_: the queue's tensor_stats stays empty, and this
    // batch keeps the room of the one it came from for their expansion below.
    std::swap(batch.tensor_stats, queue_.tensor_stats);
    taken_stats_.clear();
    std::swap(taken_stats_, queued_stats_);
    std::swap(meta, pending_meta_);
    queued_ = 0;
    SyncWriterTagsLocked();
    tick_seen_scalars = tick_seen_scalars_;
    tick_seen_stats = tick_seen_stats_;
    tick_seen_scalars_ = tick_seen_stats_ = 0;
  }
  for (size_t i = 0; i < taken_stats_.points.size(); ++i) batch.tensor_stats.push_back(taken_stats_.Expand(i));
  store_ids_.resize(writer_tags_.size(), 0);
  const bool new_tags = store_ids_.size() > first_new_tag;
  if (observed && !ticked_.empty()) {
    // What the ticks have not handed over yet; the findings go into this commit.
    const size_t before = batch.findings.size();
    TickBatch(batch, taken_stats_, tick_seen_scalars, tick_seen_stats, &batch.findings);
    if (batch.findings.size() > before) {
      std::lock_guard lock(mu_);
      live_findings_.insert(live_findings_.end(), batch.findings.begin() + static_cast<std::ptrdiff_t>(before),
                            batch.findings.end());
    }
  }
  const double now = WallNow();
  // An idle run still writes a heartbeat every few seconds so readers can tell it lives.
  if (batch.empty() && !new_tags && meta.empty() && unwritten_meta_.empty() && unwritten_findings_.empty() &&
      now - last_commit_ < 5.0) {
    return;
  }
  // While the store fails, a write is tried every retry_interval_ (and at the end); what
  // comes in between is dropped without touching the disk, so the training never waits on
  // a failing store and the queue never fills behind it.
  const bool attempt = !store_failing_ || last || now >= next_retry_;
  Status s;
  std::string cause = fault_cause_;
  // What earlier failed writes kept, written before this batch's own meta (which wins).
  std::vector<std::pair<std::string, std::string>> write_meta;
  std::swap(write_meta, unwritten_meta_);
  write_meta.insert(write_meta.end(), meta.begin(), meta.end());
  if (!attempt || (last && store_failing_)) {
    // At the end of a run whose store is failing, the last batch is not tried: the space
    // the held-back reserve frees is kept for marking the run ended (Close), which says
    // what was lost.
    // No checkpoint here: one that cannot finish (the file cannot grow) would spend the
    // released space; Close checkpoints only if the end cannot be written without.
    if (last && store_failing_) ReleaseReserve();
    s = Status::IOError(run_dir_ + ": the run store is failing (" + fault_cause_ + "); not written");
  } else {
    // A full WAL folds into the file and gives its space (or its length, under a file size
    // limit) back: the WAL grows up to 1000 pages between checkpoints, which on a nearly
    // full disk is what fills it. After that, the write is tried once more at once.
    if (store_failing_ && store_) (void)store_->Checkpoint();
    s = WriteToStore(batch, write_meta);
    if (!s.ok() && store_ && store_->last_fault() == "disk full" && store_->Checkpoint().ok()) {
      s = WriteToStore(batch, write_meta);
    }
    if (!s.ok()) cause = store_ ? store_->last_fault() : create_fault_;
    if (cause.empty()) cause = "I/O error";
    last_commit_ = now;
  }
  // The drop is counted before the observers see the batch: one may take it over.
  if (!s.ok()) {
    if (attempt) NoteStoreFault(s, cause);  // a batch dropped between tries leaves the next try where it is
    DropBatch(batch, &write_meta, fault_cause_);
  }
  if (observed) {
    Commit commit{writer_tags_, first_new_tag, meta, batch, s};
    for (RecorderObserver* observer : commit_order_) observer->OnCommit(commit);
  }
  if (s.ok() && store_failing_) NoteStoreRecovered();
}

// One try at writing meta and batch: the store made if it is not yet, the series it has not
// made, the findings an earlier failed write kept, then the batch.
Status Recorder::WriteToStore(WriteBatch& batch, const std::vector<std::pair<std::string, std::string>>& meta) {
  Status w;
  if (!store_) w = CreateStore();
  for (const auto& [key, value] : meta) {
    if (w.ok()) w = store_->SetMetaValue(key, value);
  }
  // Every series the store has not made yet: the new ones, and those a failed write left.
  std::vector<std::pair<std::string, SeriesKind>> unmade;
  std::vector<size_t> unmade_ids;
  for (size_t i = 0; i < store_ids_.size(); ++i) {
    if (store_ids_[i] != 0) continue;
    unmade.emplace_back(writer_tags_[i], writer_kinds_[i]);
    unmade_ids.push_back(i);
  }
  if (w.ok() && !unmade.empty()) {
    std::vector<int64_t> made;
    w = store_->EnsureSeriesAll(unmade, &made);
    for (size_t k = 0; w.ok() && k < made.size(); ++k) store_ids_[unmade_ids[k]] = made[k];
  }
  if (w.ok() && !unwritten_findings_.empty()) {
    WriteBatch kept;
    kept.findings = std::move(unwritten_findings_);
    unwritten_findings_.clear();
    w = store_->Write(kept);
    if (!w.ok()) unwritten_findings_ = std::move(kept.findings);
  }
  if (w.ok()) {
    // The store wants its own series ids, the observers the recorder's: the ids are
    // swapped in for the write and back after it, so an observer can take the batch
    // itself rather than a copy.
    std::vector<int64_t> recorder_ids;
    recorder_ids.reserve(batch.scalars.size() + batch.tensor_stats.size() + batch.vectors.size());
    auto map_ids = [&](auto& records) {
      for (auto& r : records) {
        recorder_ids.push_back(r.series_id);
        r.series_id = store_ids_[static_cast<size_t>(r.series_id)];
      }
    };
    map_ids(batch.scalars);
    map_ids(batch.tensor_stats);
    map_ids(batch.vectors);
    w = store_->Write(batch);
    size_t at = 0;
    auto unmap = [&](auto& records) {
      for (auto& r : records) r.series_id = recorder_ids[at++];
    };
    unmap(batch.scalars);
    unmap(batch.tensor_stats);
    unmap(batch.vectors);
  }
  return w;
}

void Recorder::NoteStoreFault(const Status& s, const std::string& cause) {
  next_retry_ = WallNow() + retry_interval_;
  if (store_failing_) {
    fault_cause_ = cause;  // a retry that failed: the cause may have changed, the message is said
    return;
  }
  store_failing_ = true;
  fault_cause_ = cause;
  std::lock_guard lock(mu_);
  if (writer_status_.ok()) writer_status_ = s;
  std::fprintf(stderr,
               "trainscope: cannot write to the run store (%s; %s); training goes on, data is dropped and counted; "
               "trying again every %g s\n",
               s.message().c_str(), cause.c_str(), retry_interval_);
}

void Recorder::NoteStoreRecovered() {
  store_failing_ = false;
  std::string gaps, drops;
  {
    std::lock_guard lock(mu_);
    if (gap_open_) {
      const Gap& g = gaps_.back();
      std::fprintf(stderr,
                   "trainscope: the run store is writable again; recording goes on (steps %lld-%lld lost points: "
                   "%s)\n",
                   static_cast<long long>(g.first_step), static_cast<long long>(g.last_step), g.cause.c_str());
    } else {
      std::fprintf(stderr, "trainscope: the run store is writable again; recording goes on\n");
    }
    gap_open_ = false;
    gaps = GapsJsonLocked();
    drops = DropsJsonLocked();
  }
  HoldReserve();
  // The gap is on record at once: a run killed later still says what it lost.
  Status s = store_->SetMetaValue("gaps", gaps);
  if (s.ok()) s = store_->SetMetaValue("drops", drops);
  if (s.ok()) s = store_->SetMetaValue("dropped_points", std::to_string(dropped()));
  if (!s.ok()) {
    unwritten_meta_.emplace_back("gaps", gaps);
    unwritten_meta_.emplace_back("drops", drops);
  }
}

Status Recorder::CreateStore() {
  create_fault_.clear();
  Status s = RunStore::Create(run_dir_, create_meta_, &store_, &create_fault_);
  if (s.ok() && max_store_bytes_ > 0) s = store_->LimitFileSize(max_store_bytes_);
  if (!s.ok()) {
    store_.reset();
    return s;
  }
  return Status::Ok();
}

void Recorder::HoldReserve() {
  if (!reserve_path_.empty() || run_dir_.empty()) return;
  const std::string path = (fs::path(run_dir_) / kReserveFileName).string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  // Real blocks, not a hole: posix_fallocate, or zeros written where it is not supported.
  bool held = posix_fallocate(fd, 0, kReserveBytes) == 0;
  if (!held) {
    static const char zeros[16384] = {};
    held = true;
    for (off_t done = 0; done < kReserveBytes && held; done += sizeof(zeros)) {
      held = ::write(fd, zeros, sizeof(zeros)) == static_cast<ssize_t>(sizeof(zeros));
    }
  }
  ::close(fd);
  if (held) {
    reserve_path_ = path;
  } else {
    ::unlink(path.c_str());
  }
}

void Recorder::ReleaseReserve() {
  if (reserve_path_.empty()) return;
  ::unlink(reserve_path_.c_str());
  reserve_path_.clear();
}

std::string Recorder::GapsJsonLocked() const {
  nlohmann::json out = nlohmann::json::array();
  for (const Gap& g : gaps_) out.push_back({g.first_step, g.last_step, g.cause});
  return out.dump();
}

std::string Recorder::DropsJsonLocked() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [cause, count] : store_drops_) out[cause] = count;
  const uint64_t queue_full = queue_full_drops_.load(std::memory_order_relaxed);
  if (queue_full) out["queue full"] = out.value("queue full", uint64_t{0}) + queue_full;
  return out.dump();
}

void Recorder::SyncWriterTagsLocked() {
  for (size_t i = writer_tags_.size(); i < tags_.size(); ++i) {
    writer_tags_.push_back(tags_[i].first);
    writer_kinds_.push_back(tags_[i].second);
    for (Ticked& t : ticked_) t.watched.push_back(t.observer->Watches(tags_[i].first, tags_[i].second) ? 1 : 0);
  }
}

// Between commits: hand over the part of the queue no tick has seen, copying under mu_ only
// the points of series some ticked observer watches (a scan of what 50 ms of logging queued).
void Recorder::Tick() {
  {
    std::lock_guard lock(mu_);
    SyncWriterTagsLocked();
    CollectWatched(queue_.scalars, tick_seen_scalars_, queued_stats_, tick_seen_stats_);
    tick_seen_scalars_ = queue_.scalars.size();
    tick_seen_stats_ = queued_stats_.points.size();
  }
  std::vector<Finding> findings;
  HandOverWatched(&findings);
  if (findings.empty()) return;
  std::lock_guard lock(mu_);
  for (Finding& f : findings) {
    live_findings_.push_back(f);
    queue_.findings.push_back(std::move(f));  // stored with the next write
    ++queued_;
  }
}

void Recorder::TickBatch(const WriteBatch& batch, const QueuedStats& stats, size_t seen_scalars, size_t seen_stats,
                         std::vector<Finding>* findings) {
  CollectWatched(batch.scalars, seen_scalars, stats, seen_stats);
  HandOverWatched(findings);
}

// Each ticked observer's points of `from` past the ones already seen, of the series it watches.
void Recorder::CollectWatched(const std::vector<WriteBatch::ScalarPoint>& scalars, size_t seen_scalars,
                              const QueuedStats& stats, size_t seen_stats) {
  for (Ticked& t : ticked_) {
    t.scalars.clear();
    t.stats.clear();
    for (size_t i = seen_scalars; i < scalars.size(); ++i) {
      if (t.watched[scalars[i].series_id]) t.scalars.push_back(scalars[i]);
    }
    for (size_t i = seen_stats; i < stats.points.size(); ++i) {
      if (t.watched[stats.points[i].series_id]) t.stats.push_back(stats.Expand(i));
    }
  }
}

void Recorder::HandOverWatched(std::vector<Finding>* findings) {
  for (Ticked& t : ticked_) {
    if (!t.scalars.empty() || !t.stats.empty()) t.observer->OnTick({writer_tags_, t.scalars, t.stats}, findings);
  }
}

}  // namespace trainscope
