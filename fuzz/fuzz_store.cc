// Fuzzes the run store's read path with the bytes of a run file. The bytes go to a real
// file (the store reads files, through SQLite's own pager), which is opened read-only and
// read whole: metadata, every series, decimated scalars, spans and findings, and window by
// window as diagnose reads it. A damaged file must read as far as it can, with its damage
// reported, and never crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/run_data.h"
#include "store/run_io.h"
#include "store/run_store.h"

namespace {

std::string TempPath() {
  static const std::string path = "/tmp/fuzz_store_" + std::to_string(::getpid()) + ".db";
  return path;
}

void RemoveFiles(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::remove((path + suffix).c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = TempPath();
  RemoveFiles(path);
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    if (size) std::fwrite(data, 1, size, f);
    std::fclose(f);
  } else {
    return 0;
  }
  {
    std::unique_ptr<trainscope::RunStore> store;
    trainscope::DamageLog damage;
    if (trainscope::RunStore::OpenReadOnly(path, &store, &damage).ok()) {
      trainscope::RunData run;
      (void)trainscope::ReadRun(*store, &run);
      std::vector<trainscope::SeriesInfo> series;
      if (store->ListSeries(&series).ok()) {
        for (const auto& info : series) {
          if (info.kind != trainscope::SeriesKind::kScalar) continue;
          std::vector<trainscope::Bucket> buckets;
          (void)store->ReadDecimated(info.tag, 7, INT64_MIN, INT64_MAX, &buckets);
          (void)store->ReadDecimated(info.tag, 1000, info.first_step, info.last_step, &buckets);
        }
      }
      // The window-by-window reader diagnose uses on stored runs, in small windows.
      store->UnmapReads();
      trainscope::RunData windowed;
      (void)trainscope::ReplayStepsInWindows(*store, &windowed, [](int64_t) {}, 16);
      int64_t step = 0;
      (void)store->MaxStep(&step);
      if (damage.count() != store->damage().count()) __builtin_trap();  // every report reaches both
    }
  }
  RemoveFiles(path);
  return 0;
}
