#include "ingest/tfrecord.h"

#include <gtest/gtest.h>

#include <cstring>

#include "ingest/crc32c.h"

namespace trainscope::ingest {
namespace {

std::string ThreeRecords() {
  std::string file;
  AppendTfRecord("first", &file);
  AppendTfRecord(std::string(300, 'x'), &file);
  AppendTfRecord("", &file);
  return file;
}

TEST(TfRecord, ReadsWhatWasWritten) {
  const std::string file = ThreeRecords();
  TfRecordScanner scanner(file.data(), file.size());
  std::string_view r;
  ASSERT_EQ(scanner.Next(&r), TfRecordScanner::kRecord);
  EXPECT_EQ(r, "first");
  ASSERT_EQ(scanner.Next(&r), TfRecordScanner::kRecord);
  EXPECT_EQ(r, std::string(300, 'x'));
  ASSERT_EQ(scanner.Next(&r), TfRecordScanner::kRecord);
  EXPECT_EQ(r, "");
  EXPECT_EQ(scanner.Next(&r), TfRecordScanner::kEnd);
  EXPECT_EQ(scanner.offset(), file.size());
  EXPECT_TRUE(LooksLikeTfRecord(file));
  EXPECT_FALSE(LooksLikeTfRecord("hello world, not a record"));
}

TEST(TfRecord, EveryTruncationIsAPartialTailAtTheLastCompleteRecord) {
  const std::string file = ThreeRecords();
  const size_t first_end = 12 + 5 + 4, second_end = first_end + 12 + 300 + 4;
  for (size_t cut = 0; cut < file.size(); ++cut) {
    TfRecordScanner scanner(file.data(), cut);
    std::string_view r;
    TfRecordScanner::Result result;
    int records = 0;
    while ((result = scanner.Next(&r)) == TfRecordScanner::kRecord) ++records;
    const int expected = cut >= second_end ? 2 : cut >= first_end ? 1 : 0;
    EXPECT_EQ(records, expected) << cut;
    if (cut == 0 || cut == first_end || cut == second_end) {
      EXPECT_EQ(result, TfRecordScanner::kEnd) << cut;
    } else {
      EXPECT_EQ(result, TfRecordScanner::kPartial) << cut;
      EXPECT_EQ(scanner.offset(), expected == 2 ? second_end : expected == 1 ? first_end : 0u);
    }
  }
}

TEST(TfRecord, DataChecksumMismatchSkipsOneRecordAndGoesOn) {
  std::string file = ThreeRecords();
  file[12 + 2] ^= 1;  // inside the first record's data
  TfRecordScanner scanner(file.data(), file.size());
  std::string_view r;
  EXPECT_EQ(scanner.Next(&r), TfRecordScanner::kBadRecord);
  EXPECT_NE(scanner.error().find("offset 0"), std::string::npos) << scanner.error();
  EXPECT_NE(scanner.error().find("checksum"), std::string::npos);
  ASSERT_EQ(scanner.Next(&r), TfRecordScanner::kRecord);
  EXPECT_EQ(r.size(), 300u);
}

TEST(TfRecord, HeaderChecksumMismatchStops) {
  std::string file = ThreeRecords();
  const size_t second = 12 + 5 + 4;
  file[second + 1] ^= 0x40;  // the length of the second record
  TfRecordScanner scanner(file.data(), file.size());
  std::string_view r;
  EXPECT_EQ(scanner.Next(&r), TfRecordScanner::kRecord);
  EXPECT_EQ(scanner.Next(&r), TfRecordScanner::kCorrupt);
  EXPECT_EQ(scanner.offset(), second);
  EXPECT_NE(scanner.error().find("offset " + std::to_string(second)), std::string::npos) << scanner.error();
}

TEST(TfRecord, LengthOfTwoToTheSixtyWithAValidChecksumIsDamageNotAWait) {
  std::string file;
  AppendTfRecord("ok", &file);
  char header[12];
  const uint64_t length = uint64_t{1} << 60;
  std::memcpy(header, &length, 8);
  const uint32_t crc = MaskCrc(Crc32c(header, 8));
  std::memcpy(header + 8, &crc, 4);
  file.append(header, 12);
  file.append("some bytes");
  TfRecordScanner scanner(file.data(), file.size());
  std::string_view r;
  EXPECT_EQ(scanner.Next(&r), TfRecordScanner::kRecord);
  EXPECT_EQ(scanner.Next(&r), TfRecordScanner::kCorrupt);
  EXPECT_NE(scanner.error().find("1152921504606846976"), std::string::npos) << scanner.error();
}

}  // namespace
}  // namespace trainscope::ingest
