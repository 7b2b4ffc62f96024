# SPDX-License-Identifier: MIT
"""The rules the extension modules bind, and what each takes beyond q, k, v.

`extras` lists the per-token inputs in the order the C++ binding fills them
(python/src/rule_fields.hpp); `number` names the rule's scalar parameter, if any.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    name: str                 # the C++ module's suffix: forward_<name>, backward_<name>
    extras: tuple = ()        # per-token inputs after q, k, v, e.g. ("g", "beta")
    per_key: tuple = ()       # those of `extras` that are [B, T, HV, K] (the others are [B, T, HV])
    number: str = ""          # scalar parameter (NLMS eps_k, RLS delta)
    backward: bool = True     # the library has a backward pass for it
    cuda: bool = False        # the CUDA backend has kernels for it (linattn/cuda.cuh): forward and backward
    state_extra_columns: bool = False  # RLS: state [N, HV, K, V + K]


RULES = {r.name: r for r in (
    Rule("hebbian", cuda=True),
    Rule("scalar_decay", ("g",), cuda=True),
    Rule("vector_decay", ("g",), per_key=("g",), cuda=True),
    Rule("delta", ("beta",), cuda=True),
    Rule("gated_delta", ("g", "beta"), cuda=True),
    Rule("longhorn", ("delta",), cuda=True),
    Rule("nlms", (), number="eps_k"),
    Rule("rls", ("g",), number="delta", backward=False, state_extra_columns=True),
    Rule("kda", ("g", "beta"), per_key=("g",), cuda=True),
)}
