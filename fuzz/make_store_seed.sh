#!/usr/bin/env bash
# Makes the seed of fuzz_store, fuzz/corpus/store/: real run files written by the build's
# `trainscope import` from the tfevents seeds (scalars, histograms as tensor statistics),
# re-paged to 512-byte pages so a whole run is a few KB (the store writes 16 KiB pages,
# which put even an empty run at ~200 KB, too big for a fuzzer to mutate well). One copy
# stays in WAL mode, as the recorder leaves a run, one is in rollback-journal mode.
#
#   fuzz/make_store_seed.sh [build/trainscope]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cli=${1:-$root/build/trainscope}
out=$root/fuzz/corpus/store
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
for seed in scalars_histograms tensors_plugins; do
  "$cli" import --format tfevents -o "$work/$seed" "$root/fuzz/corpus/tfevents/$seed" > /dev/null
  db=$work/$seed/trainscope.db
  sqlite3 "$db" "PRAGMA journal_mode=DELETE; PRAGMA page_size=512; VACUUM;" > /dev/null
  cp "$db" "$out/$seed"
  sqlite3 "$db" "PRAGMA journal_mode=WAL;" > /dev/null
  cp "$db" "$out/wal-$seed"  # not $seed-wal: SQLite would take that for $seed's WAL file
done
ls -l "$out"
