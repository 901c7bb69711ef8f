#!/usr/bin/env bash
# Builds the fuzz targets (the ingest readers, the run store's read path and the server's
# request path) with clang (ASan + UBSan + libFuzzer) and runs each for a few seconds from
# the seed corpus in
# fuzz/corpus/<target>/. Any crash, leak or undefined behaviour fails the run; the
# reproducer is left in $FUZZ_BUILD/crashes/.
#
#   fuzz/run.sh                 # ~5 s per target (the `make test` setting)
#   FUZZ_SECONDS=600 fuzz/run.sh   # a longer hunt
#   make fuzz-long              # 120 s per target, corpus kept across runs, crashes kept as regressions
# FUZZ_BUILD (default build-fuzz) is the build directory. New interesting inputs go to
# $FUZZ_CORPUS/<target>/ (default $FUZZ_BUILD/corpus), never into the repository. With
# FUZZ_KEEP_CRASHES=1 each crash's reproducer is also copied into fuzz/corpus/<target>/,
# so every later run (CI's included) replays it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-5}
corpus=${FUZZ_CORPUS:-$build/corpus}
targets=(tfevents json csv text_log detect store trace wandb mlflow server)

if ! command -v clang++ > /dev/null; then
  echo "fuzz/run.sh: clang++ not found (scripts/packages.d/ingest.txt lists clang and libclang-rt-14-dev)" >&2
  exit 2
fi
mkdir -p "$build"
cmake -S "$root/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 2; }
ninja -C "$build" -j"${JOBS:-2}" $(printf 'fuzz_%s ' "${targets[@]}") > "$build/build.log" 2>&1 ||
  { tail -50 "$build/build.log" >&2; exit 2; }

mkdir -p "$build/crashes"
status=0
for t in "${targets[@]}"; do
  mkdir -p "$corpus/$t"
  # A store input is a whole run file: SQLite's pages are 512 bytes at the least.
  max_len=65536
  [ "$t" = store ] && max_len=131072
  log="$build/fuzz_$t.log"
  if ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$build/fuzz_$t" -max_total_time="$seconds" -max_len="$max_len" -rss_limit_mb=2048 -timeout=10 \
      -artifact_prefix="$build/crashes/$t-" -print_final_stats=1 \
      "$corpus/$t" "$root/fuzz/corpus/$t" > "$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    echo "fuzz_$t: ok ($runs inputs in ${seconds}s)"
  else
    echo "fuzz_$t: FAILED; see $log and $build/crashes/" >&2
    grep -E 'ERROR|runtime error|SUMMARY' "$log" | head -5 >&2 || true
    if [ "${FUZZ_KEEP_CRASHES:-0}" = 1 ]; then
      for crash in "$build/crashes/$t"-*; do
        [ -f "$crash" ] || continue
        cp "$crash" "$root/fuzz/corpus/$t/regression-${crash##*/$t-}"
        echo "fuzz_$t: kept $crash as fuzz/corpus/$t/regression-${crash##*/$t-}" >&2
      done
    fi
    status=1
  fi
done
exit $status
