#include "numerics/formats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

namespace trainscope::numerics {
namespace {

const FloatFormat& Get(const char* name) {
  const FloatFormat* f = FormatTable::Builtin().Find(name);
  EXPECT_NE(f, nullptr) << name;
  static FloatFormat none;
  return f ? *f : none;
}

TEST(Formats, BuiltinTableHasTheIssueFormats) {
  for (const char* name : {"fp64", "fp32", "tf32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "fp6-e3m2", "fp6-e2m3",
                           "fp4-e2m1"}) {
    EXPECT_NE(FormatTable::Builtin().Find(name), nullptr) << name;
  }
  EXPECT_EQ(FormatTable::Builtin().Find("half"), FormatTable::Builtin().Find("FP16"));
  EXPECT_EQ(FormatTable::Builtin().Find("float8_e4m3fn"), FormatTable::Builtin().Find("e4m3"));
  EXPECT_EQ(FormatTable::Builtin().Find("fp7"), nullptr);
}

TEST(Formats, Fp16ExactValues) {
  const FloatFormat& f = Get("fp16");
  EXPECT_EQ(f.bits, 16);
  EXPECT_EQ(f.bias, 15);
  EXPECT_EQ(f.max_finite, 65504.0);
  EXPECT_EQ(f.min_normal, std::ldexp(1.0, -14));
  EXPECT_EQ(f.min_subnormal, std::ldexp(1.0, -24));
  EXPECT_EQ(f.epsilon, std::ldexp(1.0, -10));
  EXPECT_EQ(f.overflow_threshold, 65520.0);
  EXPECT_EQ(f.underflow_threshold, std::ldexp(1.0, -25));
  EXPECT_EQ(f.max_pattern, 0x7bffu);
  EXPECT_EQ(f.inf_pattern, 0x7c00u);
  EXPECT_EQ(f.nan_pattern, 0x7e00u);
  EXPECT_EQ(f.nan_pattern_count, 2u * 1023u);
  EXPECT_TRUE(f.has_inf);
  EXPECT_EQ(f.precision, 3);
}

TEST(Formats, Bf16Tf32Fp32Fp64) {
  const FloatFormat& bf = Get("bf16");
  EXPECT_EQ(bf.max_finite, std::ldexp(255.0, 120));  // (2 - 2^-7) * 2^127
  EXPECT_NEAR(bf.max_finite, 3.3895e38, 0.0001e38);
  EXPECT_EQ(bf.epsilon, 0.0078125);
  EXPECT_EQ(bf.min_normal, static_cast<double>(std::numeric_limits<float>::min()));
  EXPECT_EQ(bf.min_subnormal, std::ldexp(1.0, -133));
  const FloatFormat& tf = Get("tf32");
  const FloatFormat& f32 = Get("fp32");
  EXPECT_EQ(tf.layout.mantissa_bits, 10);
  EXPECT_EQ(tf.bits, 19);
  EXPECT_EQ(tf.min_normal, f32.min_normal);  // FP32's range ...
  EXPECT_EQ(tf.max_exponent, f32.max_exponent);
  EXPECT_EQ(tf.epsilon, Get("fp16").epsilon);  // ... FP16's precision
  EXPECT_EQ(f32.max_finite, static_cast<double>(std::numeric_limits<float>::max()));
  EXPECT_EQ(f32.min_subnormal, static_cast<double>(std::numeric_limits<float>::denorm_min()));
  EXPECT_EQ(f32.epsilon, static_cast<double>(std::numeric_limits<float>::epsilon()));
  const FloatFormat& f64 = Get("fp64");
  EXPECT_EQ(f64.max_finite, std::numeric_limits<double>::max());
  EXPECT_EQ(f64.min_normal, std::numeric_limits<double>::min());
  EXPECT_EQ(f64.min_subnormal, std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(f64.epsilon, std::numeric_limits<double>::epsilon());
  EXPECT_EQ(f64.precision, 15);
  EXPECT_EQ(f32.precision, 6);
}

TEST(Formats, Fp8OcpValues) {
  const FloatFormat& e4 = Get("fp8-e4m3");
  EXPECT_EQ(e4.max_finite, 448.0);
  EXPECT_FALSE(e4.has_inf);
  EXPECT_TRUE(e4.has_nan);
  EXPECT_EQ(e4.nan_pattern, 0x7fu);
  EXPECT_EQ(e4.max_pattern, 0x7eu);
  EXPECT_EQ(e4.min_normal, std::ldexp(1.0, -6));
  EXPECT_EQ(e4.min_subnormal, std::ldexp(1.0, -9));
  EXPECT_EQ(e4.epsilon, 0.125);
  EXPECT_EQ(e4.overflow_threshold, 464.0);
  const FloatFormat& e5 = Get("fp8-e5m2");
  EXPECT_EQ(e5.max_finite, 57344.0);
  EXPECT_TRUE(e5.has_inf);
  EXPECT_EQ(e5.inf_pattern, 0x7cu);
  EXPECT_EQ(e5.min_normal, std::ldexp(1.0, -14));
  EXPECT_EQ(e5.min_subnormal, std::ldexp(1.0, -16));
  EXPECT_EQ(e5.epsilon, 0.25);
  EXPECT_EQ(Get("fp8-e4m3fnuz").max_finite, 240.0);
  EXPECT_EQ(Get("fp8-e4m3fnuz").nan_pattern, 0x80u);
  EXPECT_EQ(Get("fp8-e5m2fnuz").max_finite, 57344.0);
  EXPECT_EQ(Get("fp8-e5m2fnuz").min_subnormal, std::ldexp(1.0, -17));
}

TEST(Formats, MxElements) {
  EXPECT_EQ(Get("fp4-e2m1").max_finite, 6.0);
  EXPECT_EQ(Get("fp4-e2m1").min_subnormal, 0.5);
  EXPECT_EQ(Get("fp6-e3m2").max_finite, 28.0);
  EXPECT_EQ(Get("fp6-e3m2").min_subnormal, 0.0625);
  EXPECT_EQ(Get("fp6-e2m3").max_finite, 7.5);
  EXPECT_EQ(Get("fp6-e2m3").min_subnormal, 0.125);
  EXPECT_FALSE(Get("fp4-e2m1").has_nan);
}

// The thresholds are where rounding really changes class: checked against Round.
TEST(Formats, ThresholdsMatchRounding) {
  for (const FloatFormat& f : FormatTable::Builtin().formats()) {
    if (f.layout.exponent_bits > 8) continue;  // FP64's Round is the identity
    SCOPED_TRACE(f.name());
    const double above = std::nextafter(f.overflow_threshold, 1e300);
    const double below = std::nextafter(f.overflow_threshold, 0.0);
    EXPECT_EQ(f.Round(below), f.max_finite);
    const double r = f.Round(above);
    if (f.layout.encoding == Encoding::kFinite) EXPECT_EQ(r, f.max_finite);
    else if (f.has_inf) EXPECT_TRUE(std::isinf(r));
    else EXPECT_TRUE(std::isnan(r));
    EXPECT_EQ(f.Round(f.underflow_threshold), 0.0);  // the tie goes to even: zero
    EXPECT_EQ(f.Round(std::nextafter(f.underflow_threshold, 1.0)), f.min_subnormal);
    EXPECT_EQ(f.Round(std::nextafter(f.normal_threshold, 0.0)), f.min_normal - f.min_subnormal);
    EXPECT_EQ(f.Round(f.normal_threshold), f.min_normal);
    EXPECT_EQ(f.Round(1.0 + f.epsilon), 1.0 + f.epsilon);
    EXPECT_EQ(f.Round(1.0 + f.epsilon / 2), 1.0);  // tie to even
  }
}

TEST(Formats, DeriveRejectsImpossibleLayouts) {
  FloatFormat f;
  FormatLayout bad;
  bad.name = "x";
  bad.exponent_bits = 0;
  bad.mantissa_bits = 3;
  Status s = DeriveFormat(bad, &f);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("exponent_bits"), std::string::npos);
  FormatLayout no_nan;
  no_nan.name = "y";
  no_nan.exponent_bits = 4;
  no_nan.mantissa_bits = 0;
  EXPECT_FALSE(DeriveFormat(no_nan, &f).ok());
}

TEST(Formats, ParseErrorsNameTheRow) {
  FormatTable t;
  Status s = FormatTable::Parse(R"({"formats": [{"name": "a", "exponent_bits": 4, "mantissa_bits": 3},
                                                {"name": "b", "exponent_bits": "4", "mantissa_bits": 3}]})",
                                "extra.json", &t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("extra.json: formats[1]: \"exponent_bits\" must be an integer"), std::string::npos)
      << s.message();
  s = FormatTable::Parse("{", "extra.json", &t);
  EXPECT_NE(s.message().find("extra.json: not valid JSON"), std::string::npos);
  s = FormatTable::Parse(R"({"formats": [{"name": "c", "exponent_bits": 4, "mantissa_bits": 3, "encoding": "odd"}]})",
                         "extra.json", &t);
  EXPECT_NE(s.message().find("encoding"), std::string::npos);
}

TEST(Formats, AddFromFile) {
  const std::string path = ::testing::TempDir() + "/formats_extra.json";
  {
    std::ofstream out(path);
    out << R"({"formats": [{"name": "fp5-e2m2", "exponent_bits": 2, "mantissa_bits": 2, "encoding": "finite"}]})";
  }
  FormatTable table;
  ASSERT_TRUE(LoadFormatTable(path, &table).ok());
  const FloatFormat* f = table.Find("fp5-e2m2");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->max_finite, 7.0);  // 2^2 * 1.75
  EXPECT_NE(table.Find("fp16"), nullptr);
  {
    std::ofstream out(path);
    out << R"({"formats": [{"name": "half", "exponent_bits": 5, "mantissa_bits": 10}]})";
  }
  const Status s = LoadFormatTable(path, &table);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("already"), std::string::npos);
  EXPECT_TRUE(LoadFormatTable(path + ".missing", &table).IsNotFound());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace trainscope::numerics
