#!/usr/bin/env bash
# Installs the Debian packages trainscope builds and tests with, only those missing.
# docs/dependencies.md says why each one is here.
set -euo pipefail

packages=(
  # build
  g++ cmake ninja-build pkg-config
  # C++ libraries
  libsqlite3-dev nlohmann-json3-dev libfmt-dev libcli11-dev libcpp-httplib-dev pybind11-dev
  # tests and benchmarks
  libgtest-dev libbenchmark-dev python3-pytest
  # Python and the test torch (CPU); without OpenBLAS torch uses the reference BLAS, 16x slower
  python3-dev python3-venv python3-numpy python3-torch libopenblas0-pthread
)
# Extra packages a part declares in scripts/packages.d/*.txt (one name a line).
if compgen -G "$(dirname "$0")/packages.d/*.txt" > /dev/null; then
  while read -r name; do
    [[ -n "$name" && "$name" != \#* ]] && packages+=("$name")
  done < <(cat "$(dirname "$0")"/packages.d/*.txt)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
