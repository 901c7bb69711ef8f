// Fuzzes the text-log reader (every line family).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/run_data.h"
#include "ingest/text_log_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainscope::RunData run;
  trainscope::ingest::ImportStats stats;
  (void)trainscope::ingest::ReadTextLogBuffer(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz",
                                              &run, &stats);
  return 0;
}
