#include "ingest/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#define TRAINSCOPE_CRC_X86 1
#include <nmmintrin.h>
#endif

namespace trainscope::ingest {

namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // CRC-32C, reflected

// Slice-by-8 tables: table[k][b] is the CRC of byte b followed by k zero bytes.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

#ifdef TRAINSCOPE_CRC_X86
// Compiled for SSE4.2 only in this function; called only when the CPU says it has it.
__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  if (n >= 4) {
    uint32_t word;
    std::memcpy(&word, p, 4);
    c32 = _mm_crc32_u32(c32, word);
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    uint16_t half;
    std::memcpy(&half, p, 2);
    c32 = _mm_crc32_u16(c32, half);
    p += 2;
    n -= 2;
  }
  if (n) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
}

bool DetectHardware() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n) {
  const auto& t = GetTables().t;
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return ~c;
}

bool Crc32cIsHardware() {
#ifdef TRAINSCOPE_CRC_X86
  static const bool hardware = DetectHardware();
  return hardware;
#else
  return false;
#endif
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
#ifdef TRAINSCOPE_CRC_X86
  if (Crc32cIsHardware()) return Crc32cHardware(crc, static_cast<const uint8_t*>(data), n);
#endif
  return Crc32cExtendPortable(crc, data, n);
}

}  // namespace trainscope::ingest
