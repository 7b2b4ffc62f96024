# SPDX-License-Identifier: MIT
"""pytest plugin (`-p fla_shim`): before fla's tests are collected, fla's op functions are
replaced by linattn.torch's, in every fla module a test may import them from. fla's naive
references are left alone, and so is the other form, so that each test compares ours with
fla's reference code:

    LINATTN_SHIM=chunk      replace the chunk_* functions (default)
    LINATTN_SHIM=recurrent  replace the fused_recurrent_* functions
    LINATTN_SHIM=all        replace both
"""

import importlib
import os

import linattn.torch as ours

_FUNCTIONS = {
    "gated_delta_rule": ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"),
    "delta_rule": ("chunk_delta_rule", "fused_recurrent_delta_rule"),
    "simple_gla": ("chunk_simple_gla",),
    "gla": ("chunk_gla",),
    "linear_attn": ("chunk_linear_attn",),
    "kda": ("chunk_kda", "fused_recurrent_kda"),
}

replaced = []


def _wanted(name, which):
    form = "recurrent" if name.startswith("fused_recurrent") else "chunk"
    return which in ("all", form)


def pytest_configure(config):
    which = os.environ.get("LINATTN_SHIM", "chunk")
    for package, names in _FUNCTIONS.items():
        for module in ("fla.ops", f"fla.ops.{package}", f"fla.ops.{package}.chunk",
                       f"fla.ops.{package}.fused_recurrent"):
            try:
                m = importlib.import_module(module)
            except ImportError:
                continue
            for name in names:
                if _wanted(name, which) and hasattr(m, name):
                    setattr(m, name, getattr(ours, name))
                    replaced.append(f"{module}.{name}")


def pytest_report_header(config):
    return f"linattn shim ({os.environ.get('LINATTN_SHIM', 'chunk')}): replaced {len(replaced)} names: " + \
        ", ".join(sorted(set(r.rsplit('.', 1)[1] for r in replaced)))
