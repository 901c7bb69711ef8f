#!/usr/bin/env bash
# The dashboard benchmark (docs/bench/dashboard.md):
#   1. a run of 1,000 series x 100,000 steps (100 M points, ~2.4 GB) is generated once;
#   2. `trainscope serve` on its logdir; 8 concurrent keep-alive clients ask for random
#      series decimated to 1,000 buckets: alone, beside a writer process appending to
#      another run, and beside a real PyTorch training recording to another run;
#   3. the page's first chart, from navigation start, in headless Debian chromium.
# Usage: bench/server/run_bench.sh [BENCH_DIR]   (TRAINSCOPE_BUILD_DIR, default build/)
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
build="${TRAINSCOPE_BUILD_DIR:-$repo/build}"
dir="${1:-/tmp/trainscope-bench-dashboard}"
requests="${REQUESTS:-250}"
logdir="$dir/logdir"
mkdir -p "$logdir"
if [[ ! -f "$logdir/big/trainscope.db" ]]; then
  echo "bench: generating 1,000 series x 100,000 steps into $logdir/big" >&2
  /usr/bin/time -f "bench: generated in %e s" "$build/trainscope_server_gen" bulk "$logdir" big --series 1000 --steps 100000
fi
rm -rf "$logdir/live-writer" "$logdir/live-training"
port=$(( 20000 + RANDOM % 20000 ))
"$build/trainscope" serve "$logdir" --port "$port" > "$dir/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
sleep 1
url="http://127.0.0.1:$port/"
load() {
  "$build/trainscope_server_load" --port "$port" --clients "${1:-8}" --requests "$requests" --series 1000 \
    --path-template '/api/scalars?run=big&tag=metric/m%04d&width=1000'
}
lscpu | grep -E "Model name|^CPU\(s\)" >&2
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
curl -s -o /dev/null "${url}api/runs"  # first listing opens every store
echo "1 client:       $(load 1)"
echo "alone:          $(load)"
"$build/trainscope_server_gen" writer "$logdir" live-writer --seconds 600 --series 50 > /dev/null &
writer=$!
sleep 1
echo "beside writer:  $(load)"
kill "$writer"; wait "$writer" 2>/dev/null || true
python_path="$build/python"; [[ -d "$python_path/trainscope" ]] || python_path="$repo/build/python"
PYTHONPATH="$python_path" OMP_NUM_THREADS=1 /usr/bin/python3 "$repo/tests/e2e/train_fixture.py" "$logdir" live-training 100000 > /dev/null 2>&1 &
training=$!
sleep 4
echo "beside training: $(load)"
kill "$training"; wait "$training" 2>/dev/null || true
echo "first chart (big run, train/loss): $(node "$repo/bench/server/first_chart.mjs" "$url" big train/loss 7)"
# Issue 19: a run of 1 M points per series and one of 500 parameters (docs/benchmarks.md).
[[ -f "$logdir/points1m/trainscope.db" ]] || "$build/trainscope_server_gen" bulk "$logdir" points1m --series 4 --steps 1000000
[[ -f "$logdir/params500/trainscope.db" ]] || "$build/trainscope_server_gen" demo "$logdir" params500 --steps 200 --layers 500
sleep 2  # the server's poller finds the new runs
echo "first chart (1 M points, train/loss): $(node "$repo/bench/server/first_chart.mjs" "$url" points1m train/loss 7)"
echo "overview (500 parameters): $(node "$repo/bench/server/page_ready.mjs" "$url" params500 overview 7)"
echo "gradients (500 parameters): $(node "$repo/bench/server/page_ready.mjs" "$url" params500 gradients 5)"
