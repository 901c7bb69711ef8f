#!/usr/bin/env bash
# Prints the path of the torch-2 test venv, making it first if it is missing or its pins
# changed. It lives outside the checkout (a fresh clone reuses it) under
# ${TRAINSCOPE_CACHE:-~/.cache/trainscope}, named by a hash of the interpreter and of
# scripts/torch2-requirements.txt; venvs of older pins are removed (each is ~6 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-/usr/bin/python3}
requirements=scripts/torch2-requirements.txt
key=$( { "$python" -c 'import sys; print(sys.version)'; cat "$requirements"; } | sha256sum | cut -c1-12)
cache=${TRAINSCOPE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainscope}
venv=$cache/torch2-$key
if [[ ! -f $venv/.complete ]]; then
  mkdir -p "$cache"
  for old in "$cache"/torch2-*; do [[ -e $old && $old != "$venv" ]] && rm -rf "$old"; done
  rm -rf "$venv"
  echo "torch2-venv: making $venv (pip downloads about 5 GB: torch's CUDA build)" >&2
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q -r "$requirements" >&2
  touch "$venv/.complete"
fi
echo "$venv"
