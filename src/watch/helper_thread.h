// HelperThread: the one thread beside the training on which run.watch() takes statistics
// of host tensors (gradient passes while the optimizer steps, weight passes while the next
// forward runs, activation passes while backward runs). Jobs run one at a time in the order
// they were pushed; each Push() returns a ticket, and WaitFor(ticket) returns once that job
// and every one before it has finished, not later ones (the optimizer step waits for the
// weight pass while the gradient pass pushed after it goes on).
//
// Thread-safe. The destructor finishes the queued jobs, then joins the thread: a job's
// memory (tensors) is its submitter's to keep alive until WaitFor has returned.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace trainscope::watch {

class HelperThread {
 public:
  using Ticket = uint64_t;  // 1, 2, 3, ... in push order; 0 is "no job" (WaitFor(0) returns at once)

  HelperThread();
  ~HelperThread();
  HelperThread(const HelperThread&) = delete;
  HelperThread& operator=(const HelperThread&) = delete;

  Ticket Push(std::function<void()> job);
  // Runs job on the calling thread, now, when the helper has nothing queued or running (and
  // is not paused); returns its ticket (done on return), or 0 when the helper is busy and
  // the job was not run. For jobs cheaper than waking the helper: on a VM the wake (a futex
  // wake of an idle vCPU) costs the caller 20-60 us, more than the statistics of a small model.
  Ticket RunHereIfIdle(const std::function<void()>& job);
  void WaitFor(Ticket ticket);
  void WaitAll();
  bool Done(Ticket ticket);

  // Holds queued jobs until Resume() (tests: a helper that runs late). A job already running
  // finishes; the destructor resumes first.
  void Pause();
  void Resume();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::function<void()>> jobs_;
  Ticket pushed_ = 0, finished_ = 0;
  bool paused_ = false, stop_ = false, running_here_ = false;
  std::thread thread_;  // last: starts after the members it reads
};

}  // namespace trainscope::watch
