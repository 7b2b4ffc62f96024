# SPDX-License-Identifier: MIT
"""torch.library registration: opcheck of the custom ops (schema, fake tensors, autograd
registration), and torch.compile graphs that keep the op (fullgraph) with gradients equal to
eager mode."""

import pytest
import torch

import linattn.torch as la
from conftest import close, make_inputs, make_state


def test_opcheck_forward_and_backward():
    q, k, v, g, beta = make_inputs(T=9, dtype=torch.float64, requires_grad=True)
    h0 = make_state(2, 4, 16, 12, dtype=torch.float64, requires_grad=True)
    for normalize_qk in (False, True):
        args = ("gated_delta", "chunk", q, k, v, [g, beta], h0, None, 0.25, normalize_qk, 0.0, 4, True)
        torch.library.opcheck(torch.ops.linattn.forward.default, args)
    cu = torch.tensor([0, 4, 9])
    qp, kp, vp, gp, bp = make_inputs(B=1, T=9, dtype=torch.float64)
    torch.library.opcheck(torch.ops.linattn.forward.default,
                          ("delta", "recurrent", qp, kp, vp, [bp], None, cu, 0.25, False, 0.0, 64, True))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_keeps_the_op(backend):
    q, k, v, g, beta = make_inputs(T=21, dtype=torch.float32, requires_grad=True)

    def layer(q, k, v, g, beta):
        o, s = la.chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, output_final_state=True)
        return o.sum() + s.square().sum()

    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    got = torch.autograd.grad(compiled(q, k, v, g, beta), (q, k, v, g, beta))
    want = torch.autograd.grad(layer(q, k, v, g, beta), (q, k, v, g, beta))
    for a, b in zip(got, want):
        close(a, b, 1e-6)
