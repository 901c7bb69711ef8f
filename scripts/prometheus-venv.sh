#!/usr/bin/env bash
# Prints the path of a small venv holding Prometheus' Python client from PyPI, pinned, making
# it first if it is missing: the team server's test parses /metrics with its OpenMetrics
# parser (the parser Prometheus' Python users run), on either torch leg. It lives under
# ${TRAINSCOPE_CACHE:-~/.cache/trainscope}, named by the pin; older ones are removed.
set -euo pipefail
python=${PYTHON:-/usr/bin/python3}
pin=prometheus-client==0.26.0
key=$( { "$python" -c 'import sys; print(sys.version)'; echo "$pin"; } | sha256sum | cut -c1-12)
cache=${TRAINSCOPE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainscope}
venv=$cache/prometheus-$key
if [[ ! -f $venv/.complete ]]; then
  mkdir -p "$cache"
  for old in "$cache"/prometheus-*; do [[ -e $old && $old != "$venv" ]] && rm -rf "$old"; done
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$pin" >&2
  touch "$venv/.complete"
fi
echo "$venv"
