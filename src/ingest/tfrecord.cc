#include "ingest/tfrecord.h"

#include <cstring>

#include "ingest/crc32c.h"

namespace trainscope::ingest {

namespace {
uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t Load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
}  // namespace

TfRecordScanner::Result TfRecordScanner::Next(std::string_view* record) {
  const size_t left = size_ - pos_;
  if (left == 0) return kEnd;
  const uint64_t at = base_ + pos_;
  if (left < 12) {
    error_ = "offset " + std::to_string(at) + ": file ends inside a record header (" + std::to_string(left) +
             " of 12 bytes)";
    return kPartial;
  }
  const char* p = data_ + pos_;
  const uint64_t length = Load64(p);
  const uint32_t length_crc = UnmaskCrc(Load32(p + 8));
  if (Crc32c(p, 8) != length_crc) {
    error_ = "offset " + std::to_string(at) + ": expected a record header whose length checksum matches, found a mismatch (corrupt length " +
             std::to_string(length) + ")";
    return kCorrupt;
  }
  if (length > kMaxTfRecordLength) {
    error_ = "offset " + std::to_string(at) + ": expected a record length of at most " +
             std::to_string(kMaxTfRecordLength) + " bytes, found " + std::to_string(length);
    return kCorrupt;
  }
  if (left - 12 < length + 4) {
    error_ = "offset " + std::to_string(at) + ": file ends inside a record of " + std::to_string(length) +
             " bytes (" + std::to_string(left - 12) + " bytes present)";
    return kPartial;
  }
  const char* body = p + 12;
  pos_ += 12 + length + 4;
  if (verify_ && Crc32c(body, length) != UnmaskCrc(Load32(body + length))) {
    error_ = "offset " + std::to_string(at) + ": expected record data matching its checksum, found a mismatch (" +
             std::to_string(length) + " bytes skipped)";
    return kBadRecord;
  }
  *record = std::string_view(body, length);
  return kRecord;
}

void AppendTfRecord(std::string_view data, std::string* out) {
  char header[12];
  const uint64_t length = data.size();
  std::memcpy(header, &length, 8);
  const uint32_t length_crc = MaskCrc(Crc32c(header, 8));
  std::memcpy(header + 8, &length_crc, 4);
  out->append(header, 12);
  out->append(data.data(), data.size());
  const uint32_t data_crc = MaskCrc(Crc32c(data.data(), data.size()));
  out->append(reinterpret_cast<const char*>(&data_crc), 4);
}

bool LooksLikeTfRecord(std::string_view prefix) {
  if (prefix.size() < 12) return false;
  return Crc32c(prefix.data(), 8) == UnmaskCrc(Load32(prefix.data() + 8));
}

}  // namespace trainscope::ingest
