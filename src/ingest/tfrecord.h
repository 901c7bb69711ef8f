// TFRecord framing, the container of TensorBoard event files.
//
// A record is: uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
// `length` bytes of data, uint32 masked CRC-32C of the data.
//
// TfRecordScanner walks the records of a byte range in place. It tells apart a file that
// simply ends inside a record (a writer is still appending: stop, remember the offset,
// resume later) from damage: a length whose checksum does not match or that no writer
// could have produced stops the scan (nothing after it can be trusted), while a record
// whose data checksum fails is skipped and counted (its length was good, so the next
// record is still found).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trainscope::ingest {

// Records larger than this are treated as damage, not as a file still being written:
// TensorBoard's own writers never produce them, and trusting a bogus 2^60 length would
// make "resume later" wait forever.
inline constexpr uint64_t kMaxTfRecordLength = uint64_t{1} << 31;

class TfRecordScanner {
 public:
  enum Result {
    kRecord,      // *record holds the data of the next record
    kEnd,         // clean end of the range
    kPartial,     // the range ends inside a record; offset() is where it starts
    kBadRecord,   // a record's data checksum failed; it was skipped, scanning may go on
    kCorrupt,     // unusable framing at offset(); stop
  };

  // `base_offset` is the file offset of data[0] (for messages and resume offsets).
  TfRecordScanner(const char* data, size_t size, uint64_t base_offset = 0, bool verify_data_crc = true)
      : data_(data), size_(size), base_(base_offset), verify_(verify_data_crc) {}

  Result Next(std::string_view* record);
  // File offset of the next record to read (after kRecord/kBadRecord), or of the partial
  // or corrupt record (after kPartial/kCorrupt).
  uint64_t offset() const { return base_ + pos_; }
  // What was wrong, after kBadRecord/kCorrupt/kPartial: "offset N: expected ..., found ...".
  const std::string& error() const { return error_; }

 private:
  const char* data_;
  size_t size_;
  uint64_t base_;
  bool verify_;
  size_t pos_ = 0;
  std::string error_;
};

// Appends one framed record to *out.
void AppendTfRecord(std::string_view data, std::string* out);

// Whether bytes look like the start of a TFRecord file (first header's CRC matches).
bool LooksLikeTfRecord(std::string_view prefix);

}  // namespace trainscope::ingest
