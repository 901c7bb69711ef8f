// CRC-32C (Castagnoli), the checksum of TFRecord framing.
//
// Crc32c() uses the SSE4.2 crc32 instruction when the running CPU has it (checked once, at
// run time, so one binary serves every x86-64 machine) and a slice-by-8 table otherwise.
// Both give the same result for every input.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainscope::ingest {

// CRC-32C of data[0, n), continuing from `crc` (0 for a fresh checksum).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

// The table version, always available (tests compare it with the hardware one).
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);
// Whether Crc32cExtend runs on the hardware instruction on this CPU.
bool Crc32cIsHardware();

// TFRecord stores checksums "masked" (rotated and offset) because a CRC of data that
// itself embeds CRCs is weak; these convert between the two forms.
inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace trainscope::ingest
