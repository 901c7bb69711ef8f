// Floating-point formats: the layout (sign, exponent and mantissa bits, bias, how Inf and
// NaN are encoded) and every value that follows from it, derived by one function.
//
// The table is data (data/numerics/formats.json, compiled in); more rows can be read from a
// file of the same shape (FP6/FP4 MX elements are rows there, not code).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace trainscope::numerics {

// Where the special values live.
enum class Encoding {
  kIeee,    // all-ones exponent: Inf (mantissa 0) and NaN (else); IEEE 754, BF16, TF32, E5M2
  kFn,      // no Inf; only S.1..1.1..1 is NaN (OCP FP8 E4M3: "finite, NaN")
  kFnuz,    // no Inf, no -0: the pattern 1.0..0.0..0 is the one NaN (FP8 *fnuz)
  kFinite,  // every pattern is a number: no Inf, no NaN (OCP MX FP6/FP4 elements)
};
const char* EncodingName(Encoding encoding);

// The layout, as a row of the table gives it.
struct FormatLayout {
  std::string name;                  // "fp16"
  std::vector<std::string> aliases;  // "float16", "half", ...
  int exponent_bits = 0;
  int mantissa_bits = 0;             // explicit (stored) fraction bits
  int bias = -1;                     // -1: the IEEE default 2^(exponent_bits-1) - 1
  Encoding encoding = Encoding::kIeee;
  std::string torch_dtype;           // torch's name when torch has the type ("" when not)
  std::string standard;              // where it is defined, one line
};

// A format with every derived value. Values are exact (each is a dyadic rational that a
// double holds exactly, FP64's smallest subnormal 2^-1074 included).
struct FloatFormat {
  FormatLayout layout;
  int bits = 0;                 // 1 + exponent + mantissa
  int bias = 0;
  int max_exponent = 0;         // unbiased exponent of the largest finite value
  int min_exponent = 0;         // unbiased exponent of the smallest normal (1 - bias)
  double max_finite = 0;        // largest finite value
  double min_normal = 0;        // 2^min_exponent
  double min_subnormal = 0;     // 2^(min_exponent - mantissa_bits)
  double epsilon = 0;           // 2^-mantissa_bits: the gap after 1.0
  double decimal_digits = 0;    // (mantissa_bits + 1) * log10(2): significant decimal digits
  int precision = 0;            // floor(-log10(epsilon)): numpy's/torch.finfo's "precision"
  double resolution = 0;        // 10^-precision (torch.finfo.resolution)
  // Rounding to nearest even, what converting a wider value does:
  double overflow_threshold = 0;   // |x| >= this leaves the range (max + half its ulp)
  double underflow_threshold = 0;  // |x| <= this rounds to zero (min_subnormal / 2)
  double normal_threshold = 0;     // |x| >= this rounds to a normal (min_normal - min_subnormal/2)
  bool has_inf = false;
  bool has_nan = false;
  bool has_negative_zero = true;
  // Bit patterns (sign bit clear unless stated), as unsigned integers of `bits` bits.
  uint64_t max_pattern = 0;
  uint64_t inf_pattern = 0;     // valid when has_inf
  uint64_t nan_pattern = 0;     // a quiet NaN (the only one for fn/fnuz); valid when has_nan
  uint64_t nan_pattern_count = 0;  // how many patterns are NaN (both signs)

  const std::string& name() const { return layout.name; }
  // The value a double rounds to in this format (round to nearest, ties to even); +-Inf, or
  // NaN where the format has no Inf, when it leaves the range; +-max for kFinite.
  double Round(double x) const;
};

// Derives every value of a format from its layout. Fails (InvalidArgument, naming the
// format and the field) on layouts no format can have: 1..11 exponent bits, 0..52 mantissa
// bits (so every value is a double), a bias that leaves no normal numbers.
Status DeriveFormat(const FormatLayout& layout, FloatFormat* out);

// The table: the built-in formats (data/numerics/formats.json), plus those added.
class FormatTable {
 public:
  // The compiled-in table.
  static const FormatTable& Builtin();
  // Parses a table from JSON text: {"formats": [{"name", "exponent_bits", "mantissa_bits",
  // "encoding", ...}]}. `source` names the text in errors ("formats.json: formats[3]: ...").
  static Status Parse(std::string_view json_text, const std::string& source, FormatTable* out);
  // Adds the rows of another table (a name already here is an error: formats do not change
  // meaning silently).
  Status Add(const FormatTable& more, const std::string& source);

  const std::vector<FloatFormat>& formats() const { return formats_; }
  // By name or alias, case-insensitive ("fp16", "float16", "half", "E4M3"); nullptr if none.
  const FloatFormat* Find(std::string_view name) const;
  // The list of names, comma-separated (for error messages).
  std::string Names() const;
  // Appends the formats a comma-separated list names ("fp16,bf16"; empty items skipped);
  // with `all` given, the name "all" stands for those formats. InvalidArgument naming an
  // unknown one and the known names.
  Status FindList(std::string_view list, std::vector<const FloatFormat*>* out,
                  const std::vector<std::string_view>& all = {}) const;

 private:
  std::vector<FloatFormat> formats_;
};

// Reads FILE and adds its formats to a copy of the built-in table.
Status LoadFormatTable(const std::string& extra_file, FormatTable* out);

}  // namespace trainscope::numerics
