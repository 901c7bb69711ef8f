#include "watch/tensor_passes.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace trainscope::watch {

namespace {

constexpr size_t kUpdateBlock = 16384;  // values per difference buffer: 64-128 KiB, in L2

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000 | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: exact in float
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}
float BFloat16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// Converts values [offset, offset + count) of a 16-bit tensor to float (exactly).
void Widen(const void* data, DType dtype, size_t offset, size_t count, float* out) {
  const uint16_t* in = static_cast<const uint16_t*>(data) + offset;
  if (dtype == DType::kFloat16) {
    for (size_t i = 0; i < count; ++i) out[i] = HalfToFloat(in[i]);
  } else {
    for (size_t i = 0; i < count; ++i) out[i] = BFloat16ToFloat(in[i]);
  }
}

// Reads value i of any dtype as double (for the cheap, non-SIMD passes).
template <class F>
void ForEachValue(const void* data, size_t begin, size_t end, DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: {
      const float* p = static_cast<const float*>(data);
      for (size_t i = begin; i < end; ++i) f(i, static_cast<double>(p[i]));
      break;
    }
    case DType::kFloat64: {
      const double* p = static_cast<const double*>(data);
      for (size_t i = begin; i < end; ++i) f(i, p[i]);
      break;
    }
    case DType::kFloat16: {
      const uint16_t* p = static_cast<const uint16_t*>(data);
      for (size_t i = begin; i < end; ++i) f(i, static_cast<double>(HalfToFloat(p[i])));
      break;
    }
    case DType::kBFloat16: {
      const uint16_t* p = static_cast<const uint16_t*>(data);
      for (size_t i = begin; i < end; ++i) f(i, static_cast<double>(BFloat16ToFloat(p[i])));
      break;
    }
  }
}

}  // namespace

bool ValidDType(int code) { return code >= 0 && code <= 3; }

TensorStats StatsOf(const void* data, size_t n, DType dtype, bool histogram) {
  switch (dtype) {
    case DType::kFloat32: return ComputeTensorStats(static_cast<const float*>(data), n, histogram);
    case DType::kFloat64: return ComputeTensorStats(static_cast<const double*>(data), n, histogram);
    case DType::kFloat16: return ComputeTensorStatsHalf(static_cast<const uint16_t*>(data), n, histogram);
    case DType::kBFloat16: return ComputeTensorStatsBFloat16(static_cast<const uint16_t*>(data), n, histogram);
  }
  return TensorStats{};
}

TensorStats StatsWithRowNorms(const void* data, size_t rows, size_t row_len, DType dtype, bool histogram,
                              std::vector<float>* row_norms) {
  // The whole tensor in one call (a call per row would pay the per-call setup thousands of
  // times), then the row sums of squares over the raw values: a NaN or Inf in a row makes
  // its norm NaN or Inf by itself.
  TensorStats total = StatsOf(data, rows * row_len, dtype, histogram);
  row_norms->assign(rows, 0.0f);
  if (dtype == DType::kFloat32) {
    const float* p = static_cast<const float*>(data);
    for (size_t r = 0; r < rows; ++r) {
      const float* row = p + r * row_len;
      double acc[4] = {0, 0, 0, 0};
      size_t i = 0;
      for (; i + 4 <= row_len; i += 4) {
        for (int k = 0; k < 4; ++k) acc[k] += static_cast<double>(row[i + k]) * row[i + k];
      }
      for (; i < row_len; ++i) acc[0] += static_cast<double>(row[i]) * row[i];
      (*row_norms)[r] = static_cast<float>(std::sqrt((acc[0] + acc[1]) + (acc[2] + acc[3])));
    }
  } else {
    for (size_t r = 0; r < rows; ++r) {
      double acc = 0;
      ForEachValue(data, r * row_len, (r + 1) * row_len, dtype, [&](size_t, double x) { acc += x * x; });
      (*row_norms)[r] = static_cast<float>(std::sqrt(acc));
    }
  }
  return total;
}

void WeightAndUpdateStats(const void* current, void* previous, size_t n, DType dtype, bool histogram,
                          TensorStats* weight, TensorStats* update) {
  // Block by block (large blocks: few calls, each still in L2): the weights' statistics,
  // then the update through a buffer of differences while the block is in cache, then the
  // snapshot refreshed. The weights are read from memory once.
  *weight = TensorStats{};
  *update = TensorStats{};
  weight->has_histogram = update->has_histogram = histogram;
  if (dtype == DType::kFloat64) {
    const double* cur = static_cast<const double*>(current);
    double* prev = static_cast<double*>(previous);
    static thread_local std::vector<double> diff(kUpdateBlock);
    for (size_t i = 0; i < n; i += kUpdateBlock) {
      const size_t m = std::min(kUpdateBlock, n - i);
      MergeTensorStats(*weight, ComputeTensorStats(cur + i, m, histogram));
      for (size_t j = 0; j < m; ++j) diff[j] = cur[i + j] - prev[i + j];
      std::memcpy(prev + i, cur + i, m * sizeof(double));
      MergeTensorStats(*update, ComputeTensorStats(diff.data(), m, histogram));
    }
    return;
  }
  static thread_local std::vector<float> cur_block(kUpdateBlock), diff(kUpdateBlock);
  for (size_t i = 0; i < n; i += kUpdateBlock) {
    const size_t m = std::min(kUpdateBlock, n - i);
    if (dtype == DType::kFloat32) {
      const float* cur = static_cast<const float*>(current) + i;
      float* prev = static_cast<float*>(previous) + i;
      MergeTensorStats(*weight, ComputeTensorStats(cur, m, histogram));
      for (size_t j = 0; j < m; ++j) diff[j] = cur[j] - prev[j];
      std::memcpy(prev, cur, m * sizeof(float));
    } else {
      // The difference of two 16-bit values is exact in float (it is what the optimizer
      // changed, before rounding to the tensor's dtype made it zero or not).
      MergeTensorStats(*weight, StatsOf(static_cast<const uint16_t*>(current) + i, m, dtype, histogram));
      Widen(current, dtype, i, m, cur_block.data());
      Widen(previous, dtype, i, m, diff.data());
      for (size_t j = 0; j < m; ++j) diff[j] = cur_block[j] - diff[j];
      std::memcpy(static_cast<uint16_t*>(previous) + i, static_cast<const uint16_t*>(current) + i,
                  m * sizeof(uint16_t));
    }
    MergeTensorStats(*update, ComputeTensorStats(diff.data(), m, histogram));
  }
}

double DeadFraction(const void* data, size_t outer, size_t units, size_t inner, DType dtype) {
  if (units == 0) return 0.0;
  std::vector<uint8_t> alive(units, 0);
  if (inner == 1 && dtype == DType::kFloat32) {
    // The common case (Linear outputs): a row per sample, a branch-free OR per feature.
    const float* p = static_cast<const float*>(data);
    for (size_t o = 0; o < outer; ++o) {
      const float* row = p + o * units;
      for (size_t u = 0; u < units; ++u) alive[u] |= static_cast<uint8_t>(row[u] != 0.0f);
    }
  } else if (dtype == DType::kFloat32) {
    // Channels (NCHW): a unit is alive at its first non-zero value; most are by the
    // first sample, so later samples are mostly skipped.
    const float* p = static_cast<const float*>(data);
    for (size_t o = 0; o < outer; ++o) {
      for (size_t u = 0; u < units; ++u) {
        if (alive[u]) continue;
        const float* block = p + (o * units + u) * inner;
        for (size_t i = 0; i < inner; ++i) {
          if (block[i] != 0.0f) {
            alive[u] = 1;
            break;
          }
        }
      }
    }
  } else {
    for (size_t o = 0; o < outer; ++o) {
      for (size_t u = 0; u < units; ++u) {
        if (alive[u]) continue;
        const size_t begin = (o * units + u) * inner;
        bool any = false;
        ForEachValue(data, begin, begin + inner, dtype, [&](size_t, double x) { any = any || x != 0.0; });
        alive[u] = any;
      }
    }
  }
  size_t dead = 0;
  for (uint8_t a : alive) dead += a == 0;
  return static_cast<double>(dead) / static_cast<double>(units);
}

double SaturatedFraction(const void* data, size_t n, DType dtype, Saturation kind) {
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  constexpr double high = tensor_stats::kSaturatedFractionHigh, low = tensor_stats::kSaturatedFractionLow;
  size_t saturated = 0, finite = 0;
  if (dtype == DType::kFloat32) {
    const float* p = static_cast<const float*>(data);
    constexpr float high_f = static_cast<float>(high), low_f = static_cast<float>(low);
    if (kind == Saturation::kTanh) {
      for (size_t i = 0; i < n; ++i) saturated += std::fabs(p[i]) > high_f;
    } else {
      for (size_t i = 0; i < n; ++i) saturated += (p[i] < low_f) | (p[i] > high_f);
    }
    // NaN compares false, so it is never counted saturated; Inf is (tanh/sigmoid never make Inf).
    for (size_t i = 0; i < n; ++i) finite += !std::isnan(p[i]);
  } else {
    ForEachValue(data, 0, n, dtype, [&](size_t, double x) {
      if (std::isnan(x)) return;
      ++finite;
      saturated += kind == Saturation::kTanh ? std::fabs(x) > high : (x < low || x > high);
    });
  }
  return finite ? static_cast<double>(saturated) / static_cast<double>(finite)
                : std::numeric_limits<double>::quiet_NaN();
}

void MeasureActivation(const void* data, size_t numel, size_t outer, size_t units, size_t inner, DType dtype,
                       ActivationKind kind, MeasuredTensorStats* out) {
  if (kind == kDeadUnits) out->dead_fraction = DeadFraction(data, outer, units, inner, dtype);
  if (kind == kTanh) out->saturated_fraction = SaturatedFraction(data, numel, dtype, Saturation::kTanh);
  if (kind == kSigmoid) out->saturated_fraction = SaturatedFraction(data, numel, dtype, Saturation::kSigmoid);
}

uint64_t ProcessRssBytes() {
  // Called every step: the file stays open and is re-read with pread (no path lookup).
  static const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (fd < 0) return 0;
  char buffer[128];
  const ssize_t got = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  if (got <= 0) return 0;
  buffer[got] = '\0';
  unsigned long long size = 0, resident = 0;
  if (std::sscanf(buffer, "%llu %llu", &size, &resident) != 2) return 0;
  return resident * page;
}

uint64_t RecentProcessRssBytes(double max_age_seconds) {
  // Two atomics, not a lock: two threads that both find the reading old both read, and
  // either's reading is fresh. The time is published after the value (release/acquire), so
  // a thread that sees a reading's time sees that reading or a later one.
  static std::atomic<uint64_t> held_bytes{0};
  static std::atomic<int64_t> read_at_ns{0};
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t now = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  const int64_t read_at = read_at_ns.load(std::memory_order_acquire);
  const uint64_t held = held_bytes.load(std::memory_order_relaxed);
  if (held != 0 && static_cast<double>(now - read_at) < max_age_seconds * 1e9) return held;
  const uint64_t bytes = ProcessRssBytes();
  held_bytes.store(bytes, std::memory_order_relaxed);
  read_at_ns.store(now, std::memory_order_release);
  return bytes;
}

bool ThreadFaultsAndKernelSeconds(uint64_t* minor_faults, double* kernel_seconds) {
#ifdef RUSAGE_THREAD
  rusage usage;
  if (getrusage(RUSAGE_THREAD, &usage) != 0) return false;
  *minor_faults = static_cast<uint64_t>(usage.ru_minflt);
  *kernel_seconds = static_cast<double>(usage.ru_stime.tv_sec) + static_cast<double>(usage.ru_stime.tv_usec) / 1e6;
  return true;
#else
  (void)minor_faults;
  (void)kernel_seconds;
  return false;
#endif
}

}  // namespace trainscope::watch
