// SystemSampler: a thread that records machine and process metrics into a Recorder every
// few seconds, so a training loop pays nothing for them:
//   sys/cpu_percent          all CPUs busy, 0-100 (from /proc/stat)
//   sys/process_cpu_percent  this process, 100 = one core busy (from /proc/self/stat)
//   sys/rss                  this process's resident set, bytes
//   sys/gpu<i>/util, memory_used (bytes), power_w, temperature_c, sm_clock_mhz
// The GPU metrics come from NVML, loaded with dlopen("libnvidia-ml.so.1") when the driver
// is installed; without it they are simply absent. Samples carry the step the training
// last reported with SetStep().
//
// The recorder must outlive the sampler (and stay open until Stop()). Stop() (or the
// destructor) joins the thread and takes one last sample.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "recorder/recorder.h"

namespace trainscope::watch {

class Nvml;  // the dlopen'ed driver library (system_sampler.cc)

class SystemSampler {
 public:
  SystemSampler(Recorder* recorder, double interval_seconds);
  ~SystemSampler();
  SystemSampler(const SystemSampler&) = delete;
  SystemSampler& operator=(const SystemSampler&) = delete;

  void SetStep(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  // Takes one sample now, on the caller's thread (tests; the thread calls it too).
  void SampleOnce();
  void Stop();
  // Number of GPUs NVML reported (0 without a driver).
  int gpu_count() const;

 private:
  void Loop();
  void Log(const std::string& tag, double value);

  Recorder* recorder_;
  double interval_;
  std::atomic<int64_t> step_{0};
  std::unique_ptr<Nvml> nvml_;
  // Previous /proc readings, for rates.
  uint64_t last_total_ticks_ = 0, last_idle_ticks_ = 0, last_process_ticks_ = 0;
  double last_wall_ = 0;
  std::mutex sample_mu_;  // SampleOnce from a test and the thread never overlap

  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace trainscope::watch
