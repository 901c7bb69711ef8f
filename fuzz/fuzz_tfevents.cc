// Fuzzes the TFRecord framing and Event decoding. CRC checks are off so the fuzzer reaches
// the protobuf decoder instead of stopping at the first checksum; a second pass with them
// on covers the framing errors.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/run_data.h"
#include "ingest/tfevents_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (bool verify : {false, true}) {
    trainscope::RunData run;
    trainscope::ingest::ImportStats stats;
    trainscope::ingest::TfEventsOptions options;
    options.verify_crc = verify;
    (void)trainscope::ingest::ReadTfEventsBuffer(bytes, "fuzz", 0, &run, &stats, options);
    if (stats.resume_offset > size) __builtin_trap();
  }
  return 0;
}
