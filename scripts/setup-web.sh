#!/usr/bin/env bash
# Installs the web UI's npm packages when they are missing or out of date.
set -euo pipefail
cd "$(dirname "$0")/../web"
if [[ ! -d node_modules || package-lock.json -nt node_modules/.package-lock.json ]]; then
  echo "setup: npm ci in web/" >&2
  npm ci --no-audit --no-fund --loglevel=error >&2
fi
