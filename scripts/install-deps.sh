#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what a fresh Debian/Ubuntu machine lacks to build linattn, its tests and benchmarks;
# with --plots also what bench/plot.py needs (python3 with matplotlib); with --python what the
# Python package needs to build in a virtual environment (python3 with venv and headers).
set -euo pipefail

packages=(cmake g++ make libeigen3-dev catch2 libbenchmark-dev)
if [ "${1:-}" = "--plots" ] && ! python3 -c "import matplotlib" 2>/dev/null; then
  packages+=(python3 python3-matplotlib)
fi
if [ "${1:-}" = "--python" ] && ! python3 -c "import venv, sysconfig, os; \
    assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))" 2>/dev/null; then
  packages+=(python3 python3-venv python3-dev)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "linattn: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "linattn: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
