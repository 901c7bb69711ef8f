// The server's connection workers (server.cc): a pool that grows with the connections.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>

namespace trainscope::server {

// cpp-httplib gives each connection a worker for as long as it is open, reading or not. A
// fixed pool is held by as many slow clients as it has threads (80 connections trickling
// their headers made a normal request wait 5 s: issue 28). This pool starts a worker
// whenever a connection arrives and none is free, up to `ceiling`; workers stay for the
// next connections. Slow clients then delay only themselves until the ceiling is reached.
class ElasticThreadPool : public httplib::TaskQueue {
 public:
  explicit ElasticThreadPool(size_t ceiling) : ceiling_(ceiling) {}
  ~ElasticThreadPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    jobs_.push_back(std::move(fn));
    if (jobs_.size() > idle_ && workers_.size() < ceiling_) workers_.emplace_back([this] { Work(); });
    ready_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ && workers_.empty()) return;
      stopping_ = true;
    }
    ready_.notify_all();
    std::vector<std::thread> workers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      workers.swap(workers_);
    }
    for (std::thread& t : workers) t.join();
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // stopping, nothing left
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  const size_t ceiling_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> workers_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace trainscope::server
