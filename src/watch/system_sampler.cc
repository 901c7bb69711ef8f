#include "watch/system_sampler.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/tag.h"
#include "watch/tensor_passes.h"

namespace trainscope::watch {

namespace {

double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// First line of /proc/stat: "cpu user nice system idle iowait irq softirq steal ...".
bool ReadMachineTicks(uint64_t* total, uint64_t* idle) {
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t v[8] = {};
  if (!(in >> cpu) || cpu != "cpu") return false;
  for (auto& x : v) in >> x;
  if (!in) return false;
  *total = 0;
  for (auto x : v) *total += x;
  *idle = v[3] + v[4];
  return true;
}

// utime + stime of this process (fields 14 and 15 of /proc/self/stat, after the
// parenthesised command name, which may itself hold spaces).
bool ReadProcessTicks(uint64_t* ticks) {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  *ticks = utime + stime;
  return true;
}

}  // namespace

// The few NVML entry points used, resolved by name so that nothing links against the
// driver. Struct layouts are NVML's documented ones.
class Nvml {
 public:
  using Device = void*;
  struct Utilization { unsigned int gpu, memory; };
  struct Memory { unsigned long long total, free, used; };

  static std::unique_ptr<Nvml> Load() {
    void* handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle) return nullptr;
    std::unique_ptr<Nvml> n(new Nvml(handle));
    if (!n->Resolve() || n->init_() != 0) return nullptr;
    unsigned int count = 0;
    if (n->count_(&count) != 0) return nullptr;
    for (unsigned int i = 0; i < count; ++i) {
      Device d = nullptr;
      if (n->handle_(i, &d) == 0) n->devices_.push_back(d);
    }
    n->initialised_ = true;
    return n;
  }
  ~Nvml() {
    if (initialised_ && shutdown_) shutdown_();
    dlclose(handle_lib_);
  }
  const std::vector<Device>& devices() const { return devices_; }

  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*count_)(unsigned int*) = nullptr;
  int (*handle_)(unsigned int, Device*) = nullptr;
  int (*utilization_)(Device, Utilization*) = nullptr;
  int (*memory_)(Device, Memory*) = nullptr;
  int (*power_)(Device, unsigned int*) = nullptr;               // milliwatts
  int (*temperature_)(Device, int, unsigned int*) = nullptr;    // sensor 0: the GPU die
  int (*clock_)(Device, int, unsigned int*) = nullptr;          // clock type 1: SM

 private:
  explicit Nvml(void* handle) : handle_lib_(handle) {}
  template <class F>
  bool Get(const char* name, F* f) {
    *f = reinterpret_cast<F>(dlsym(handle_lib_, name));
    return *f != nullptr;
  }
  bool Resolve() {
    return Get("nvmlInit_v2", &init_) && Get("nvmlShutdown", &shutdown_) &&
           Get("nvmlDeviceGetCount_v2", &count_) && Get("nvmlDeviceGetHandleByIndex_v2", &handle_) &&
           Get("nvmlDeviceGetUtilizationRates", &utilization_) && Get("nvmlDeviceGetMemoryInfo", &memory_) &&
           Get("nvmlDeviceGetPowerUsage", &power_) && Get("nvmlDeviceGetTemperature", &temperature_) &&
           Get("nvmlDeviceGetClockInfo", &clock_);
  }
  void* handle_lib_;
  bool initialised_ = false;
  std::vector<Device> devices_;
};

SystemSampler::SystemSampler(Recorder* recorder, double interval_seconds)
    : recorder_(recorder), interval_(interval_seconds > 0 ? interval_seconds : 5.0) {
  nvml_ = Nvml::Load();
  ReadMachineTicks(&last_total_ticks_, &last_idle_ticks_);
  ReadProcessTicks(&last_process_ticks_);
  last_wall_ = MonotonicSeconds();
  thread_ = std::thread([this] { Loop(); });
}

SystemSampler::~SystemSampler() { Stop(); }

int SystemSampler::gpu_count() const { return nvml_ ? static_cast<int>(nvml_->devices().size()) : 0; }

void SystemSampler::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    SampleOnce();  // the end state, so a run shorter than the interval has a sample too
  }
}

void SystemSampler::Loop() {
  std::unique_lock lock(mu_);
  while (!wake_.wait_for(lock, std::chrono::duration<double>(interval_), [&] { return stopping_; })) {
    lock.unlock();
    SampleOnce();
    lock.lock();
  }
}

void SystemSampler::Log(const std::string& tag, double value) {
  uint32_t id = 0;
  if (recorder_->Series(tag, SeriesKind::kScalar, &id).ok()) {
    recorder_->LogScalar(id, step_.load(std::memory_order_relaxed), value);
  }
}

void SystemSampler::SampleOnce() {
  std::lock_guard lock(sample_mu_);
  const double now = MonotonicSeconds();
  uint64_t total = 0, idle = 0, process = 0;
  // Rates need an interval well above the 10 ms clock tick; a sample right after the
  // previous one (the last one at Stop()) records only the levels.
  const bool rates = now - last_wall_ >= 0.1;
  if (rates && ReadMachineTicks(&total, &idle) && total > last_total_ticks_) {
    const double busy = static_cast<double>((total - last_total_ticks_) - (idle - last_idle_ticks_));
    Log(tags::kSysCpuPercent, 100.0 * busy / static_cast<double>(total - last_total_ticks_));
    last_total_ticks_ = total;
    last_idle_ticks_ = idle;
  }
  if (rates && ReadProcessTicks(&process)) {
    const double seconds = static_cast<double>(process - last_process_ticks_) / static_cast<double>(sysconf(_SC_CLK_TCK));
    Log(tags::kSysProcessCpuPercent, 100.0 * seconds / (now - last_wall_));
    last_process_ticks_ = process;
    last_wall_ = now;
  }
  if (const uint64_t rss = ProcessRssBytes()) Log(tags::kSysRss, static_cast<double>(rss));
  if (!nvml_) return;
  for (size_t i = 0; i < nvml_->devices().size(); ++i) {
    Nvml::Device d = nvml_->devices()[i];
    const std::string prefix = tags::kSys.Of("gpu" + std::to_string(i) + "/");
    Nvml::Utilization u{};
    if (nvml_->utilization_(d, &u) == 0) Log(prefix + "util", u.gpu);
    Nvml::Memory m{};
    if (nvml_->memory_(d, &m) == 0) Log(prefix + "memory_used", static_cast<double>(m.used));
    unsigned int value = 0;
    if (nvml_->power_(d, &value) == 0) Log(prefix + "power_w", value / 1000.0);
    if (nvml_->temperature_(d, 0, &value) == 0) Log(prefix + "temperature_c", value);
    if (nvml_->clock_(d, 1, &value) == 0) Log(prefix + "sm_clock_mhz", value);
  }
}

}  // namespace trainscope::watch
