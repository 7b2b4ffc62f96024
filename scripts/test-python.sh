#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Python package: a virtual environment in build/py-venv with torch (PyPI's default Linux
# build) and pytest, then `pip install .` (builds linattn._cpu from include/, python/CMakeLists.txt)
# and the tests in python/tests (CUDA tests skip without a GPU). Called by scripts/test.sh.
# LINATTN_PY_CUDA=ON|OFF|AUTO: the CUDA module is built (AUTO) when nvcc is found and the
# installed torch is a CUDA build (PyPI's is), so that CI compiles and imports it even without a
# GPU to run it on (about 2 minutes of the step on two cores).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --python
venv=build/py-venv
start=$SECONDS
if ! "$venv/bin/python" -c "import torch, pytest, numpy" 2>/dev/null; then
  python3 -m venv "$venv"
  # no pip cache: torch and its CUDA libraries take ~5 GB installed, and a cached copy of the wheels ~3 GB more
  "$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir torch pytest numpy
fi
echo "== python: venv ready ($((SECONDS - start)) s)"
cuda=$("$venv/bin/python" -c "import torch; print('AUTO' if torch.version.cuda else 'OFF')")
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} "$venv/bin/pip" install -q --disable-pip-version-check . \
  -Ccmake.define.LINATTN_PY_CUDA="${LINATTN_PY_CUDA:-$cuda}" -Cbuild.verbose=false
echo "== python: linattn built and installed ($((SECONDS - start)) s)"
# From the tests' folder, so that `import linattn` is the installed package, not python/linattn.
(cd python/tests && "../../$venv/bin/python" -m pytest -q -p no:cacheprovider)
echo "== python: tests done ($((SECONDS - start)) s)"
