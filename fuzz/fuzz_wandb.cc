// Fuzzes the W&B datastore reader (run-*.wandb: the block/chunk log and the Record protobufs
// in it) and the config.yaml parser: the first byte chooses which.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/run_data.h"
#include "ingest/wandb_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  trainscope::RunData run;
  trainscope::ingest::ImportStats stats;
  if (data[0] & 1) {
    std::string config;
    (void)trainscope::ingest::ParseWandbConfig(bytes, "fuzz/config.yaml", &config);
  } else {
    // A valid header in front, so the fuzzer spends its time in the chunks and records.
    std::string file = ":W&B";
    file += '\xE1';
    file += '\xBE';
    file += '\0';
    file.append(bytes);
    (void)trainscope::ingest::ReadWandbDatastore(data[0] & 2 ? bytes : std::string_view(file), "fuzz.wandb", &run, &stats);
  }
  return 0;
}
