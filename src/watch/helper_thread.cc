#include "watch/helper_thread.h"

#include <utility>

namespace trainscope::watch {

HelperThread::HelperThread() : thread_([this] { Loop(); }) {}

HelperThread::~HelperThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    paused_ = false;
  }
  work_cv_.notify_all();
  thread_.join();
}

HelperThread::Ticket HelperThread::Push(std::function<void()> job) {
  Ticket ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
    ticket = ++pushed_;
  }
  work_cv_.notify_all();
  return ticket;
}

HelperThread::Ticket HelperThread::RunHereIfIdle(const std::function<void()>& job) {
  Ticket ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (paused_ || stop_ || !jobs_.empty() || finished_ != pushed_) return 0;
    ticket = ++pushed_;
    running_here_ = true;  // a job pushed meanwhile from another thread waits for this one
  }
  job();
  std::lock_guard<std::mutex> lock(mu_);
  running_here_ = false;
  ++finished_;
  if (!jobs_.empty()) work_cv_.notify_all();
  done_cv_.notify_all();  // no waiter, no system call
  return ticket;
}

void HelperThread::WaitFor(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return finished_ >= ticket; });
}

void HelperThread::WaitAll() {
  std::unique_lock<std::mutex> lock(mu_);
  const Ticket last = pushed_;
  done_cv_.wait(lock, [&] { return finished_ >= last; });
}

bool HelperThread::Done(Ticket ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_ >= ticket;
}

void HelperThread::Pause() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = true;
}

void HelperThread::Resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
  }
  work_cv_.notify_all();
}

void HelperThread::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this] { return !jobs_.empty() ? !paused_ && !running_here_ : stop_; });
    if (jobs_.empty()) return;  // stop_, and every queued job done
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // its captures go before the ticket counts as done
    lock.lock();
    ++finished_;
    done_cv_.notify_all();
  }
}

}  // namespace trainscope::watch
