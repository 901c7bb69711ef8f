#include "core/sample.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace trainscope {

double TensorStats::stddev() const {
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

}  // namespace

TensorStats ComputeTensorStats(const float* values, size_t n, bool histogram) {
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
