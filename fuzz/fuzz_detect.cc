// Fuzzes format detection (it looks at every file a user points at).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ingest/detect.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainscope::ingest::Format format;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)trainscope::ingest::DetectFormatFromPrefix(bytes, "fuzz", true, &format);
  (void)trainscope::ingest::DetectFormatFromPrefix(bytes, "fuzz", false, &format);
  return 0;
}
