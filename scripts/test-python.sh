#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Python package: a virtual environment in build/py-venv with torch (PyPI's default Linux
# build) and pytest, then `pip install .` (builds linattn._cpu from include/, python/CMakeLists.txt)
# and the tests in python/tests (CUDA tests skip without a GPU). Called by scripts/test.sh.
# LINATTN_PY_CUDA=ON|OFF|AUTO: unset, the CUDA module is built (AUTO: when nvcc is found) where
# a GPU is visible and the installed torch is a CUDA build (PyPI's is). Without a GPU its tests
# would only skip, and its kernels are the ones the C++ build's CUDA tests already compiled, so it
# is left out there: on two cores it took 10 to 12 minutes of this step (about 3 CPU minutes per
# rule). LINATTN_PY_CUDA=AUTO or ON builds it anyway.
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
if [[ -z ${LINATTN_PY_CUDA:-} && $cuda == AUTO ]] && ! nvidia-smi -L >/dev/null 2>&1; then
  cuda=OFF
  echo "== python: no GPU visible: linattn._cuda is not built (its tests skip); LINATTN_PY_CUDA=AUTO builds it"
fi
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} "$venv/bin/pip" install -q --disable-pip-version-check . \
  -Ccmake.define.LINATTN_PY_CUDA="${LINATTN_PY_CUDA:-$cuda}" -Cbuild.verbose=false
echo "== python: linattn built and installed ($((SECONDS - start)) s)"
# From the tests' folder, so that `import linattn` is the installed package, not python/linattn.
(cd python/tests && "../../$venv/bin/python" -m pytest -q -p no:cacheprovider)
echo "== python: tests done ($((SECONDS - start)) s)"
