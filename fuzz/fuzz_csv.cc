// Fuzzes the CSV reader.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/run_data.h"
#include "ingest/csv_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainscope::RunData run;
  trainscope::ingest::ImportStats stats;
  (void)trainscope::ingest::ReadCsvBuffer(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", &run,
                                          &stats);
  return 0;
}
