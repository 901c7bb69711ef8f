#!/usr/bin/env bash
# Byte-compares `trainscope diagnose --json` of two binaries on the same inputs: the guard of
# a refactor that must not change a finding (issue 29). Without PATHs: every file and folder
# under ../shared/testdata/. Add run directories (e.g. bench/doctor/run_scenarios.py
# --logdir DIR's runs) to cover trainscope's own recordings.
#
#   scripts/compare-diagnose.sh OLD/trainscope build/trainscope [PATH...]
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 OLD_BINARY NEW_BINARY [PATH...]" >&2
  exit 2
fi
old=$1 new=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -eq 0 ]; then
  mapfile -t paths < <(find "$root/../shared/testdata" -mindepth 1 \( -type f -o -type d \) ! -name '*.md' | sort)
  set -- "${paths[@]}"
fi
for binary in "$old" "$new"; do
  [ -x "$binary" ] || { echo "$0: $binary is not an executable" >&2; exit 2; }
done
compared=0 differing=0
for path in "$@"; do
  a=$(timeout 120 "$old" diagnose --json "$path" 2>/dev/null; echo "exit $?")
  b=$(timeout 120 "$new" diagnose --json "$path" 2>/dev/null; echo "exit $?")
  compared=$((compared + 1))
  if [ "$a" != "$b" ]; then
    differing=$((differing + 1))
    echo "differs: $path"
  fi
done
echo "compared $compared, differing $differing"
[ "$differing" -eq 0 ]
