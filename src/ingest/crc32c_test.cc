#include "ingest/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace trainscope::ingest {
namespace {

TEST(Crc32c, KnownVectors) {
  // RFC 3720 (iSCSI) test vectors.
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  const std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32c, HardwareAndPortableAgreeOnEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::string buf(1000, '\0');
  for (char& c : buf) c = static_cast<char>(rng());
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t n = 0; n + offset <= buf.size(); n += 37) {
      ASSERT_EQ(Crc32c(buf.data() + offset, n), Crc32cExtendPortable(0, buf.data() + offset, n)) << offset << " " << n;
    }
  }
}

TEST(Crc32c, ExtendEqualsWhole) {
  const std::string s = "the quick brown fox jumps over the lazy dog";
  const uint32_t whole = Crc32c(s.data(), s.size());
  EXPECT_EQ(Crc32cExtend(Crc32c(s.data(), 10), s.data() + 10, s.size() - 10), whole);
}

TEST(Crc32c, MaskRoundTrip) {
  for (uint32_t v : {0u, 1u, 0xdeadbeefu, 0xffffffffu}) EXPECT_EQ(UnmaskCrc(MaskCrc(v)), v);
  EXPECT_NE(MaskCrc(0xdeadbeefu), 0xdeadbeefu);
}

TEST(Crc32c, ReportsWhetherHardwareIsUsed) {
#if defined(__x86_64__)
  EXPECT_EQ(Crc32cIsHardware(), __builtin_cpu_supports("sse4.2") != 0);
#else
  EXPECT_FALSE(Crc32cIsHardware());
#endif
}

}  // namespace
}  // namespace trainscope::ingest
