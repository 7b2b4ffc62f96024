# SPDX-License-Identifier: MIT
"""Each public function with the reference it must match, as (name, call, rule, takes) rows:
`call(q, k, v, g, beta, **kw)` runs linattn.torch, `rule` names the reference, `takes` says
which of g and beta it uses (the tests pass None for the others)."""

import linattn.torch as la

CASES = [
    # name                              call                                                    rule            takes
    ("chunk_gated_delta_rule", lambda q, k, v, g, b, **kw: la.chunk_gated_delta_rule(q, k, v, g, b, **kw), "gated_delta", "gb"),
    ("fused_recurrent_gated_delta_rule",
     lambda q, k, v, g, b, **kw: la.fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=b, **kw), "gated_delta", "gb"),
    ("chunk_delta_rule", lambda q, k, v, g, b, **kw: la.chunk_delta_rule(q, k, v, b, **kw), "delta", "b"),
    ("fused_recurrent_delta_rule", lambda q, k, v, g, b, **kw: la.fused_recurrent_delta_rule(q, k, v, b, **kw), "delta", "b"),
    ("chunk_simple_gla", lambda q, k, v, g, b, **kw: la.chunk_simple_gla(q, k, v, g, **kw), "scalar_decay", "g"),
    ("chunk_gla", lambda q, k, v, g, b, **kw: la.chunk_gla(q, k, v, g, **kw), "vector_decay", "gk"),
    ("chunk_linear_attn",
     lambda q, k, v, g, b, **kw: la.chunk_linear_attn(q, k, v, normalize=False, **kw), "hebbian", ""),
    ("chunk_longhorn", lambda q, k, v, g, b, **kw: la.chunk_longhorn(q, k, v, b, **kw), "longhorn", "b"),
    ("fused_recurrent_longhorn", lambda q, k, v, g, b, **kw: la.fused_recurrent_longhorn(q, k, v, b, **kw), "longhorn", "b"),
    ("chunk_nlms", lambda q, k, v, g, b, **kw: la.chunk_nlms(q, k, v, **kw), "nlms", ""),
    ("fused_recurrent_nlms", lambda q, k, v, g, b, **kw: la.fused_recurrent_nlms(q, k, v, **kw), "nlms", ""),
    # fla's chunk_kda takes chunk sizes 32 and 64 only: a test's chunk_size is dropped for it
    ("chunk_kda", lambda q, k, v, g, b, chunk_size=None, **kw: la.chunk_kda(q, k, v, g, b, **kw), "kda", "gkb"),
    ("fused_recurrent_kda", lambda q, k, v, g, b, **kw: la.fused_recurrent_kda(q, k, v, g, b, **kw), "kda", "gkb"),
]
IDS = [c[0] for c in CASES]


def gate_of(rule):
    """make_inputs' gate for a rule: one log decay per key ("key") or per token ("scalar")."""
    return "key" if rule in ("vector_decay", "kda") else "scalar"


def heads_of(rule, grouped=4, plain=2):
    """Value heads for a rule's test: fla's GLA has no grouped value heads."""
    return plain if rule == "vector_decay" else grouped


def used(takes, g, beta):
    """The reference's g and beta for a case (None for what the rule does not take)."""
    return (g if "g" in takes else None), (beta if "b" in takes else None)
