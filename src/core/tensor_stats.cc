#include "core/sample.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace trainscope {

double TensorStatsSummary::stddev() const {
  const uint64_t n = finite();
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  const double m = sum / static_cast<double>(n);
  const double variance = std::max(0.0, sum_squares / static_cast<double>(n) - m * m);
  return std::sqrt(variance);
}

int TensorStats::ExponentBin(double abs_value) {
  int exponent = 0;
  std::frexp(abs_value, &exponent);  // abs_value = f * 2^exponent, f in [0.5, 1)
  return std::clamp(exponent - 1 - kMinExponent, 0, kExponentBins - 1);
}

namespace {

// IEEE layouts the one-pass kernel understands: sign, exponent and mantissa widths.
struct Float32Layout {
  using Bits = uint32_t;
  static constexpr int kMantissaBits = 23;
  static constexpr Bits kExponentMask = 0xff;
  static constexpr int kBias = 127;
  static double ToDouble(Bits b) { return std::bit_cast<float>(b); }
};
struct Float64Layout {
  using Bits = uint64_t;
  static constexpr int kMantissaBits = 52;
  static constexpr Bits kExponentMask = 0x7ff;
  static constexpr int kBias = 1023;
  static double ToDouble(Bits b) { return std::bit_cast<double>(b); }
};
struct Float16Layout {
  using Bits = uint16_t;
  static constexpr int kMantissaBits = 10;
  static constexpr Bits kExponentMask = 0x1f;
  static constexpr int kBias = 15;
  static double ToDouble(Bits b) {
    const int exponent = (b >> 10) & 0x1f;
    const int mantissa = b & 0x3ff;
    double magnitude = exponent == 0 ? std::ldexp(mantissa, -24)
                                     : std::ldexp(1024 + mantissa, exponent - 25);
    return (b & 0x8000) ? -magnitude : magnitude;
  }
};
struct BFloat16Layout {
  using Bits = uint16_t;
  static constexpr int kMantissaBits = 7;
  static constexpr Bits kExponentMask = 0xff;
  static constexpr int kBias = 127;
  static double ToDouble(Bits b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
};

// One pass over raw IEEE bit patterns: classification and the exponent bin come from the
// bits, so no frexp/log2 per value.
template <class Layout>
TensorStats Compute(const typename Layout::Bits* bits, size_t n, bool histogram) {
  using Bits = typename Layout::Bits;
  constexpr Bits kMagnitudeMask = static_cast<Bits>(~Bits{0}) >> 1;
  constexpr Bits kMantissaMask = (Bits{1} << Layout::kMantissaBits) - 1;
  TensorStats s;
  s.numel = n;
  s.has_histogram = histogram;
  double min = std::numeric_limits<double>::infinity();
  double max = -min;
  double sum = 0, sum_squares = 0, abs_max = 0;
  uint64_t nan = 0, inf = 0, zeros = 0;
  for (size_t i = 0; i < n; ++i) {
    const Bits b = bits[i];
    const Bits magnitude = b & kMagnitudeMask;
    const int exponent_field = static_cast<int>((magnitude >> Layout::kMantissaBits) & Layout::kExponentMask);
    if (exponent_field == static_cast<int>(Layout::kExponentMask)) {
      if (magnitude & kMantissaMask) ++nan; else ++inf;
      continue;
    }
    const double x = Layout::ToDouble(b);
    min = std::min(min, x);
    max = std::max(max, x);
    sum += x;
    sum_squares += x * x;
    abs_max = std::max(abs_max, std::fabs(x));
    if (magnitude == 0) {
      ++zeros;
    } else if (histogram) {
      // Subnormals (exponent field 0) are far below 2^-64 for every layout but float16,
      // whose subnormals are handled by the same clamp on the true exponent.
      int exponent = exponent_field - Layout::kBias;
      if (exponent_field == 0) exponent = TensorStats::ExponentBin(std::fabs(x)) + TensorStats::kMinExponent;
      const int bin = std::clamp(exponent - TensorStats::kMinExponent, 0, TensorStats::kExponentBins - 1);
      ++s.exponent_counts[bin];
    }
  }
  s.nan = nan;
  s.inf = inf;
  s.zeros = zeros;
  s.min = min;
  s.max = max;
  s.sum = sum;
  s.sum_squares = sum_squares;
  s.abs_max = abs_max;
  return s;
}


#if defined(__x86_64__) && defined(__GNUC__)
#define TRAINSCOPE_HAVE_AVX2_KERNEL 1
// float32 with AVX2+FMA, chosen at run time, block by block (kBlock values, 8 KiB: the
// block stays in L1 for a second look).
//
// Fast path, taken by almost every block: min/max, sum and sum of squares in float lanes
// (16 partial sums of <= 128 values each), zeros from an integer compare. It spends 8 vector
// instructions per 8 values, a third of what converting every value to double costs. The
// block's partial sums are then added into double accumulators. A non-finite value makes
// the block's sum non-finite, and values whose squares could overflow or underflow float
// (block |max| outside [2^-50, 2^60]) would lose precision: such a block is read again on
// the exact path, where every value is converted to double (x*x of a float is exact in
// double) and NaN/Inf are counted and masked out. Relative error of the fast path's sums:
// about 1e-7, that of torch's own float32 reductions.
//
// The exponent histogram reads the same block from L1: eight counter tables used in turn,
// indexed by the raw 8-bit exponent field, folded into the 128 bins at the end.
// (Lambdas inside a target("avx2") function do not inherit the target: helpers are
// functions of their own.)
__attribute__((target("avx2"))) inline uint64_t LaneSum(__m256i counts) {
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), counts);
  uint64_t total = 0;
  for (uint32_t c : lanes) total += c;
  return total;
}
__attribute__((target("avx2"))) inline void AddToDouble(__m256 f, __m256d* lo, __m256d* hi) {
  *lo = _mm256_add_pd(*lo, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
  *hi = _mm256_add_pd(*hi, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
}

// The exponent histogram's counter tables: used in turn, so that a run of values with the
// same exponent does not wait on its own counter's last store.
constexpr size_t kExponentTables = 8;
constexpr size_t kManyTablesFrom = 4096;  // values; below, two tables
template <size_t kTables>
inline void CountExponentFields(const uint32_t* bits, size_t begin, size_t end, uint32_t (*table)[256]) {
  size_t k = begin;
  for (; k + kTables <= end; k += kTables) {
    for (size_t t = 0; t < kTables; ++t) ++table[t][(bits[k + t] >> 23) & 0xff];
  }
  for (; k < end; ++k) ++table[0][(bits[k] >> 23) & 0xff];
}

__attribute__((target("avx2,fma"))) TensorStats ComputeFloat32Avx2(const uint32_t* bits, size_t n, bool histogram) {
  TensorStats s;
  s.numel = n;
  s.has_histogram = histogram;
  const __m256i magnitude_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i below_inf = _mm256_set1_epi32(0x7f7fffff);
  const __m256i zero_i = _mm256_setzero_si256();
  const __m256 zero_f = _mm256_setzero_ps();
  const __m256 pos_inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  constexpr float kFastAbsMin = 0x1p-50f;  // squares stay far above float's subnormals
  constexpr float kFastAbsMax = 0x1p60f;   // 128 squares stay far below float's max
  __m256 vmin = pos_inf, vmax = neg_inf;
  __m256d sum_lo = _mm256_setzero_pd(), sum_hi = _mm256_setzero_pd();
  __m256d sq_lo = _mm256_setzero_pd(), sq_hi = _mm256_setzero_pd();
  uint64_t zeros = 0, nan = 0, inf = 0;
  constexpr size_t kFoldEvery = size_t{1} << 31;  // before a uint32 counter can overflow
  // A small tensor's histogram costs more in clearing and folding its tables than in
  // counting: it counts into two (store_bench BM_TensorStats).
  const size_t tables = n >= kManyTablesFrom ? kExponentTables : 2;
  alignas(32) uint32_t table[kExponentTables][256];
  if (histogram) std::memset(table, 0, tables * sizeof(table[0]));
  uint64_t field_zero = 0;  // exponent field 0: the zeros and the subnormals, told apart at the end
  size_t since_fold = 0;
  auto fold = [&] {
    alignas(32) uint32_t field[256];  // since_fold < 2^31: the tables' sum fits
    for (int e = 0; e < 256; ++e) field[e] = table[0][e] + table[1][e];
    for (size_t t = 2; t < tables; ++t) {
      for (int e = 0; e < 256; ++e) field[e] += table[t][e];
    }
    // bin = field - 127 - kMinExponent, clamped to the bins; field 255 (non-finite) is counted apart.
    constexpr int kOffset = 127 + TensorStats::kMinExponent, kLast = TensorStats::kExponentBins - 1;
    field_zero += field[0];
    for (int e = 1; e <= kOffset; ++e) s.exponent_counts[0] += field[e];
    for (int e = kOffset + 1; e < kOffset + kLast; ++e) s.exponent_counts[e - kOffset] += field[e];
    for (int e = kOffset + kLast; e < 255; ++e) s.exponent_counts[kLast] += field[e];
    std::memset(table, 0, tables * sizeof(table[0]));
    since_fold = 0;
  };
  constexpr size_t kBlock = 2048;
  size_t i = 0;
  while (i < n) {
    const size_t end = std::min(n, i + kBlock);
    const size_t vec_end = i + ((end - i) & ~size_t{7});
    // ---- fast path ----
    __m256 bmin = pos_inf, bmax = neg_inf;
    __m256 fsum0 = zero_f, fsum1 = zero_f, fsq0 = zero_f, fsq1 = zero_f;
    __m256i zero_count = zero_i;
    // min_ps(x, m) returns m when x is NaN; a NaN still reaches the sums, which sends the
    // block to the exact path.
#define TRAINSCOPE_FAST(at, fsum, fsq)                                                  \
  do {                                                                                 \
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));        \
    const __m256 x = _mm256_castsi256_ps(b);                                           \
    /* integer compare: +-0 only, whatever the FPU's denormals-are-zero mode */        \
    zero_count = _mm256_sub_epi32(zero_count, _mm256_cmpeq_epi32(_mm256_and_si256(b, magnitude_mask), zero_i)); \
    bmin = _mm256_min_ps(x, bmin);                                                     \
    bmax = _mm256_max_ps(x, bmax);                                                     \
    fsum = _mm256_add_ps(fsum, x);                                                     \
    fsq = _mm256_fmadd_ps(x, x, fsq);                                                  \
  } while (0)
    size_t j = i;
    for (; j + 16 <= vec_end; j += 16) {  // two accumulator sets: add latency would bound one
      // Gradients read after backward are out of cache, and the hardware prefetcher stops
      // at each 4 KiB page: ask for the line 4 KiB ahead (past the end is harmless).
      _mm_prefetch(reinterpret_cast<const char*>(bits + j + 1024), _MM_HINT_T0);
      TRAINSCOPE_FAST(bits + j, fsum0, fsq0);
      TRAINSCOPE_FAST(bits + j + 8, fsum1, fsq1);
    }
    if (j < vec_end) TRAINSCOPE_FAST(bits + j, fsum0, fsq0);
#undef TRAINSCOPE_FAST
    alignas(32) float check[8];
    _mm256_store_ps(check, _mm256_add_ps(_mm256_add_ps(fsum0, fsum1), _mm256_add_ps(fsq0, fsq1)));
    alignas(32) float lo_lanes[8], hi_lanes[8];
    _mm256_store_ps(lo_lanes, bmin);
    _mm256_store_ps(hi_lanes, bmax);
    float block_abs_max = 0;
    bool clean = true;
    for (int k = 0; k < 8; ++k) {
      clean = clean && std::isfinite(check[k]);
      block_abs_max = std::max({block_abs_max, std::fabs(lo_lanes[k]), std::fabs(hi_lanes[k])});
    }
    if (vec_end == i) block_abs_max = 0;  // no full vector in this block
    clean = clean && (block_abs_max == 0 || (block_abs_max >= kFastAbsMin && block_abs_max <= kFastAbsMax));
    if (clean) {
      vmin = _mm256_min_ps(vmin, bmin);
      vmax = _mm256_max_ps(vmax, bmax);
      AddToDouble(_mm256_add_ps(fsum0, fsum1), &sum_lo, &sum_hi);
      AddToDouble(_mm256_add_ps(fsq0, fsq1), &sq_lo, &sq_hi);
      zeros += LaneSum(zero_count);
    } else {
      // ---- exact path: doubles, non-finite values counted and masked out ----
      __m256i exact_zeros = zero_i, nonfinite_count = zero_i;
      for (size_t k = i; k < vec_end; k += 8) {
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + k));
        const __m256i magnitude = _mm256_and_si256(b, magnitude_mask);
        // magnitude >= 0x7f800000 (non-negative as signed ints): non-finite
        const __m256i nonfinite = _mm256_cmpgt_epi32(magnitude, below_inf);
        exact_zeros = _mm256_sub_epi32(exact_zeros, _mm256_cmpeq_epi32(magnitude, zero_i));
        nonfinite_count = _mm256_sub_epi32(nonfinite_count, nonfinite);
        const __m256 x = _mm256_andnot_ps(_mm256_castsi256_ps(nonfinite), _mm256_castsi256_ps(b));  // -> 0
        vmin = _mm256_min_ps(vmin, _mm256_blendv_ps(x, pos_inf, _mm256_castsi256_ps(nonfinite)));
        vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(x, neg_inf, _mm256_castsi256_ps(nonfinite)));
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
        const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
        sum_lo = _mm256_add_pd(sum_lo, lo);
        sum_hi = _mm256_add_pd(sum_hi, hi);
        sq_lo = _mm256_fmadd_pd(lo, lo, sq_lo);
        sq_hi = _mm256_fmadd_pd(hi, hi, sq_hi);
      }
      zeros += LaneSum(exact_zeros);
      if (LaneSum(nonfinite_count)) {  // rare: tell NaN from Inf by a scalar look
        for (size_t k = i; k < vec_end; ++k) {
          const uint32_t m = bits[k] & 0x7fffffff;
          if (m > 0x7f800000) ++nan; else if (m == 0x7f800000) ++inf;
        }
      }
    }
    for (size_t k = vec_end; k < end; ++k) {  // the tail of the last block, exactly
      const uint32_t m = bits[k] & 0x7fffffff;
      if (m >= 0x7f800000) {
        if (m > 0x7f800000) ++nan; else ++inf;
        continue;
      }
      if (m == 0) ++zeros;
      const float x = std::bit_cast<float>(bits[k]);
      vmin = _mm256_min_ps(vmin, _mm256_set1_ps(x));
      vmax = _mm256_max_ps(vmax, _mm256_set1_ps(x));
      const __m256d d = _mm256_set_pd(0, 0, 0, static_cast<double>(x));
      sum_lo = _mm256_add_pd(sum_lo, d);
      sq_lo = _mm256_fmadd_pd(d, d, sq_lo);
    }
    if (histogram) {
      if (tables == kExponentTables) {
        CountExponentFields<kExponentTables>(bits, i, end, table);
      } else {
        CountExponentFields<2>(bits, i, end, table);
      }
      since_fold += end - i;
      if (since_fold >= kFoldEvery - kBlock) fold();
    }
    i = end;
  }
  alignas(32) float fl[8];
  _mm256_store_ps(fl, vmin);
  double min = std::numeric_limits<double>::infinity();
  for (float f : fl) min = std::min<double>(min, f);
  _mm256_store_ps(fl, vmax);
  double max = -std::numeric_limits<double>::infinity();
  for (float f : fl) max = std::max<double>(max, f);
  alignas(32) double d[4];
  _mm256_store_pd(d, _mm256_add_pd(sum_lo, sum_hi));
  const double sum = (d[0] + d[1]) + (d[2] + d[3]);
  _mm256_store_pd(d, _mm256_add_pd(sq_lo, sq_hi));
  const double sum_squares = (d[0] + d[1]) + (d[2] + d[3]);
  s.nan = nan;
  s.inf = inf;
  s.zeros = zeros;
  s.min = min;
  s.max = max;
  s.sum = sum;
  s.sum_squares = sum_squares;
  s.abs_max = s.finite() > 0 ? std::max(std::fabs(min), std::fabs(max)) : 0.0;
  if (histogram) {
    fold();
    s.exponent_counts[0] += field_zero - zeros;  // the subnormals (< 2^-126): the lowest bin
  }
  return s;
}

// TRAINSCOPE_NO_SIMD=1 in the environment forces the portable kernel (benchmarks, and a
// way out should a CPU misreport its features).
bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           std::getenv("TRAINSCOPE_NO_SIMD") == nullptr;
  return have;
}
#endif

}  // namespace

// The portable kernel for float32, kept callable so tests can hold the SIMD one to it.
TensorStats ComputeTensorStatsScalar(const float* values, size_t n, bool histogram);
TensorStats ComputeTensorStatsScalar(const float* values, size_t n, bool histogram) {
  return Compute<Float32Layout>(reinterpret_cast<const uint32_t*>(values), n, histogram);
}

TensorStats ComputeTensorStats(const float* values, size_t n, bool histogram) {
#ifdef TRAINSCOPE_HAVE_AVX2_KERNEL
  if (HaveAvx2()) return ComputeFloat32Avx2(reinterpret_cast<const uint32_t*>(values), n, histogram);
#endif
  return Compute<Float32Layout>(reinterpret_cast<const uint32_t*>(values), n, histogram);
}
TensorStats ComputeTensorStats(const double* values, size_t n, bool histogram) {
  return Compute<Float64Layout>(reinterpret_cast<const uint64_t*>(values), n, histogram);
}
TensorStats ComputeTensorStatsHalf(const uint16_t* values, size_t n, bool histogram) {
  return Compute<Float16Layout>(values, n, histogram);
}
TensorStats ComputeTensorStatsBFloat16(const uint16_t* values, size_t n, bool histogram) {
  return Compute<BFloat16Layout>(values, n, histogram);
}

TensorStats TensorStatsFromReductions(uint64_t numel, double nan, double inf, double zeros, double min, double max,
                                      double sum, double sum_squares) {
  TensorStats s;
  s.numel = numel;
  s.nan = static_cast<uint64_t>(nan);
  s.inf = static_cast<uint64_t>(inf);
  s.zeros = static_cast<uint64_t>(zeros);
  s.min = min;
  s.max = max;
  s.sum = sum;
  s.sum_squares = sum_squares;
  s.abs_max = s.finite() ? std::max(std::fabs(min), std::fabs(max)) : 0.0;
  return s;
}

void MergeTensorStats(TensorStats& a, const TensorStats& b) {
  a.numel += b.numel;
  a.nan += b.nan;
  a.inf += b.inf;
  a.zeros += b.zeros;
  a.min = std::min(a.min, b.min);
  a.max = std::max(a.max, b.max);
  a.sum += b.sum;
  a.sum_squares += b.sum_squares;
  a.abs_max = std::max(a.abs_max, b.abs_max);
  a.has_histogram = a.has_histogram || b.has_histogram;
  for (int i = 0; i < TensorStats::kExponentBins; ++i) a.exponent_counts[i] += b.exponent_counts[i];
}

const char* SeverityName(Severity severity) {
  switch (severity) {
    case Severity::kInfo: return "info";
    case Severity::kWarning: return "warning";
    case Severity::kCritical: return "critical";
  }
  return "warning";
}

bool ParseSeverity(const std::string& name, Severity* severity) {
  if (name == "info") *severity = Severity::kInfo;
  else if (name == "warning") *severity = Severity::kWarning;
  else if (name == "critical") *severity = Severity::kCritical;
  else return false;
  return true;
}

}  // namespace trainscope
