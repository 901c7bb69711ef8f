#include "doctor/online_doctor.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <exception>

namespace trainscope::doctor {

OnlineDoctor::OnlineDoctor(DoctorOptions options) : options_(std::move(options)) {}

OnlineDoctor::~OnlineDoctor() { Stop(); }

Status OnlineDoctor::OnOpen(const RunStart& run, ObserverHost& host) {
  host_ = &host;
  DoctorOptions options = options_;
  options.on_finding = [this](const Finding& f) {
    std::fprintf(stderr, "trainscope: [%s] %s at step %lld%s%s: %s\n", SeverityName(f.severity), f.code.c_str(),
                 static_cast<long long>(f.step), f.location.empty() ? "" : " in ", f.location.c_str(),
                 f.summary.c_str());
    host_->AddLiveFinding(f);
  };
  // Feed hands over a batch grouped by kind (scalars, then tensor statistics, ...): steps
  // are judged at the batch's end, when all their samples are in.
  options.judge_at_batch_end = true;
  doctor_ = std::make_unique<Doctor>(std::move(options));
  doctor_->OnMeta("config", run.config_json);
  for (const auto& [key, value] : run.extra_meta) doctor_->OnMeta(key, value);
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

// After the store has the batch: the doctor takes it over (the writer gets a judged one
// back through RecycleBatch), unless its backlog is full.
void OnlineDoctor::OnCommit(Commit& commit) {
  if (!thread_.joinable()) return;
  Work work;
  for (size_t i = commit.first_new_tag; i < commit.tags.size(); ++i) work.new_tags.push_back(commit.tags[i]);
  work.meta = commit.meta;
  const size_t bytes = BatchBytes(commit.batch);
  std::lock_guard lock(mu_);
  if (queue_.size() < kBacklog && (queued_bytes_ == 0 || queued_bytes_ + bytes <= kBacklogBytes)) {
    work.bytes = bytes;
    queued_bytes_ += bytes;
    work.batch = std::move(commit.batch);
    work.batch.findings.clear();  // the doctor's own and the client's: not re-judged
    commit.batch = WriteBatch{};  // the writer takes a judged one next time
  } else {
    const WriteBatch& b = commit.batch;
    skipped_ += b.scalars.size() + b.tensor_stats.size() + b.vectors.size();
  }
  queue_.push_back(std::move(work));
  cv_.notify_one();
}

// The doctor sees what the training logged, after it is stored, on its own thread: the
// training thread never waits for a judgement and neither does the store.
void OnlineDoctor::Loop() {
  // Lower priority than the training and the writer: judging may lag, storing may not.
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, and everything was judged
    Work work = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= work.bytes;
    lock.unlock();
    Feed(work);
    if (work.batch.scalars.capacity() > 0) host_->RecycleBatch(std::move(work.batch));
    lock.lock();
  }
}

void OnlineDoctor::Feed(Work& work) {
  for (std::string& tag : work.new_tags) tags_.push_back(std::move(tag));
  if (!doctor_) return;
  try {
    for (const auto& [key, value] : work.meta) doctor_->OnMeta(key, value);
    const WriteBatch& batch = work.batch;
    for (const auto& p : batch.scalars) doctor_->OnScalar(tags_[p.series_id], p.step, p.wall_time, p.value);
    for (const auto& p : batch.tensor_stats) doctor_->OnTensorStats(tags_[p.series_id], p.step, p.wall_time, p.stats);
    for (const auto& v : batch.vectors) doctor_->OnVector(tags_[v.series_id], v.step, v.wall_time, v.values);
    for (const auto& span : batch.spans) doctor_->OnSpan(span);
    doctor_->EndBatch();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainscope: the online doctor failed (%s); recording goes on without it\n", e.what());
    doctor_.reset();
  }
}

void OnlineDoctor::Stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_one();
  }
  thread_.join();  // it judges what is queued first
}

void OnlineDoctor::OnClose(std::vector<Finding>* final_state) {
  if (!thread_.joinable()) return;
  Stop();
  if (const uint64_t skipped = this->skipped()) {
    std::fprintf(stderr, "trainscope: the online doctor skipped %llu samples to keep up; "
                 "`trainscope diagnose` judges them all\n", static_cast<unsigned long long>(skipped));
  }
  if (!doctor_) return;
  // The last steps and the end-of-run checks; their findings reach the run through on_finding.
  try {
    doctor_->Finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainscope: the online doctor failed at the end (%s)\n", e.what());
  }
  const std::vector<Finding> findings = doctor_->findings();
  final_state->insert(final_state->end(), findings.begin(), findings.end());
}

uint64_t OnlineDoctor::skipped() const {
  std::lock_guard lock(mu_);
  return skipped_;
}

}  // namespace trainscope::doctor
