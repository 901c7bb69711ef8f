#include "core/base64.h"

#include <gtest/gtest.h>

namespace trainscope {
namespace {

TEST(Base64, KnownVectorsOfRfc4648) {
  const std::pair<const char*, const char*> cases[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                       {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : cases) {
    EXPECT_EQ(Base64Encode(plain), coded);
    std::string back;
    ASSERT_TRUE(Base64Decode(coded, &back));
    EXPECT_EQ(back, plain);
  }
}

TEST(Base64, EveryByteRoundTripsAndBadTextIsRefused) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  for (size_t n = 0; n <= bytes.size(); n += 37) {
    std::string back;
    ASSERT_TRUE(Base64Decode(Base64Encode(bytes.substr(0, n)), &back));
    EXPECT_EQ(back, bytes.substr(0, n));
  }
  std::string out;
  EXPECT_FALSE(Base64Decode("Zm9v!", &out));
  EXPECT_FALSE(Base64Decode("Z", &out));
}

}  // namespace
}  // namespace trainscope
