# SPDX-License-Identifier: MIT
"""The extension modules hold an entry point for every rule the Python layer routes to them
(runs without a GPU: the CUDA module imports without a device)."""

import pytest

import linattn.torch as la
from linattn import _cpu
from linattn.torch._rules import RULES


@pytest.mark.parametrize("rule", sorted(RULES))
def test_cpu_module_binds_every_rule(rule):
    assert hasattr(_cpu, "forward_" + rule)
    assert hasattr(_cpu, "backward_" + rule) == RULES[rule].backward


def test_cuda_module_binds_its_rules():
    if not la.cuda_available():
        pytest.skip("linattn._cuda was not built here (no nvcc or a CPU-only torch at install time, "
                    "or scripts/test-python.sh without a visible GPU)")
    from linattn import _cuda
    for name, rule in RULES.items():
        assert hasattr(_cuda, "forward_" + name) == rule.cuda, name
