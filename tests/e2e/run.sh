#!/usr/bin/env bash
# The dashboard's end-to-end tests in headless Chromium (dashboard.e2e.mjs: pages and flows;
# truth.e2e.mjs: what the charts draw against what was recorded): `tests/e2e/run.sh` (make test calls
# it). Needs Debian's chromium (scripts/setup.sh installs it from scripts/packages.d/server.txt),
# node + npm, and a built tree (build/trainscope, build/trainscope_server_gen, build/python);
# TRAINSCOPE_BUILD_DIR overrides the build directory.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
build="${TRAINSCOPE_BUILD_DIR:-$repo/build}"
if [[ ! -x /usr/bin/chromium ]]; then
  echo "e2e: /usr/bin/chromium is missing: install Debian's chromium (apt-get install chromium, or scripts/setup.sh)" >&2
  exit 2
fi
command -v node >/dev/null || { echo "e2e: node is missing (apt-get install nodejs npm)" >&2; exit 2; }
for f in trainscope trainscope_server_gen; do
  [[ -x "$build/$f" ]] || { echo "e2e: $build/$f is missing: build first (make build)" >&2; exit 2; }
done
if [[ ! -f "$repo/web/node_modules/playwright-core/package.json" ]]; then
  echo "e2e: installing the web packages (npm ci in web/)" >&2
  (cd "$repo/web" && npm ci --no-audit --no-fund >&2)
fi
export TRAINSCOPE_BUILD_DIR="$build"
node --test "$repo/tests/e2e/smooth.test.mjs" "$repo/tests/e2e/views.test.mjs"
status=0
node "$repo/tests/e2e/dashboard.e2e.mjs" || status=1
node "$repo/tests/e2e/truth.e2e.mjs" || status=1
exit $status
