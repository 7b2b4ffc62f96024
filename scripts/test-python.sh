#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Python package: a virtual environment in build/py-venv with torch (PyPI's default Linux
# build) and pytest, then `pip install .` (builds linattn._cpu from include/, python/CMakeLists.txt)
# and the tests in python/tests (CUDA tests skip without a GPU). Called by scripts/test.sh.
# LINATTN_PY_CUDA=ON|OFF|AUTO (default OFF here: the CUDA module is for GPU machines; building it
# where no GPU can run it only costs time).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --python
venv=build/py-venv
start=$SECONDS
if ! "$venv/bin/python" -c "import torch, pytest, numpy" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check torch pytest numpy
fi
echo "== python: venv ready ($((SECONDS - start)) s)"
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} "$venv/bin/pip" install -q --disable-pip-version-check . \
  -Ccmake.define.LINATTN_PY_CUDA="${LINATTN_PY_CUDA:-OFF}" -Cbuild.verbose=false
echo "== python: linattn built and installed ($((SECONDS - start)) s)"
# From the tests' folder, so that `import linattn` is the installed package, not python/linattn.
(cd python/tests && "../../$venv/bin/python" -m pytest -q -p no:cacheprovider)
echo "== python: tests done ($((SECONDS - start)) s)"
