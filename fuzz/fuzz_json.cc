// Fuzzes the JSON readers: trainer_state.json, Megatron golden values and JSONL.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/run_data.h"
#include "ingest/json_readers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  trainscope::RunData run;
  trainscope::ingest::ImportStats stats;
  (void)trainscope::ingest::ReadTrainerState(text, "fuzz", &run, &stats);
  (void)trainscope::ingest::ReadMegatronGolden(text, "fuzz", &run, &stats);
  (void)trainscope::ingest::ReadJsonlBuffer(text, "fuzz", &run, &stats);
  return 0;
}
