# SPDX-License-Identifier: MIT
"""Gradients (the library's chunkwise backward through the autograd of linattn::forward) against
autograd through the float64 references, and torch.autograd.gradcheck on small shapes."""

import pytest
import torch

import linattn.torch as la
from calls import CASES, IDS, gate_of, heads_of, used
from conftest import close, make_inputs, make_state
from reference import reference


def _grads(call_outputs, inputs, do, ds):
    o, s = call_outputs
    loss = (o.double() * do).sum() + (s.double() * ds).sum()
    return torch.autograd.grad(loss, inputs, allow_unused=True)


@pytest.mark.parametrize("name,call,rule,takes", CASES, ids=IDS)
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-9), (torch.float32, 1e-4)])
def test_gradients_match_reference(name, call, rule, takes, dtype, tol):
    """dq, dk, dv, dg, dbeta and d(initial state), with gradients flowing into both o and the
    final state; odd T, K != V, grouped value heads (not for GLA)."""
    HV = heads_of(rule)
    q, k, v, g, beta = make_inputs(T=37, HV=HV, K=16, V=12, dtype=dtype,
                                   gate=gate_of(rule), requires_grad=True)
    h0 = make_state(2, HV, 16, 12, dtype=dtype, requires_grad=True)
    g_, b_ = used(takes, g, beta)
    inputs = [x for x in (q, k, v, g_, b_, h0) if x is not None]
    do = torch.randn(2, 37, HV, 12, dtype=torch.float64)
    ds = torch.randn(2, HV, 16, 12, dtype=torch.float64)
    got = _grads(call(q, k, v, g, beta, initial_state=h0, output_final_state=True), inputs, do, ds)
    want = _grads(reference(rule, q, k, v, g_, b_, h0=h0), inputs, do, ds)
    for a, b in zip(got, want):
        assert a.dtype == dtype
        close(a, b, tol)


@pytest.mark.parametrize("name,call,rule,takes", CASES, ids=IDS)
def test_gradients_packed(name, call, rule, takes):
    HV = heads_of(rule)
    cu = torch.tensor([0, 7, 7, 75, 90])
    q, k, v, g, beta = make_inputs(B=1, T=90, HV=HV, K=8, V=10, dtype=torch.float64,
                                   gate=gate_of(rule), requires_grad=True)
    h0 = make_state(4, HV, 8, 10, dtype=torch.float64, requires_grad=True)
    g_, b_ = used(takes, g, beta)
    inputs = [x for x in (q, k, v, g_, b_, h0) if x is not None]
    do = torch.randn(1, 90, HV, 10, dtype=torch.float64)
    ds = torch.randn(4, HV, 8, 10, dtype=torch.float64)
    got = _grads(call(q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu), inputs, do, ds)
    want = _grads(reference(rule, q, k, v, g_, b_, h0=h0, cu_seqlens=cu), inputs, do, ds)
    for a, b in zip(got, want):
        close(a, b, 1e-9)


@pytest.mark.parametrize("name,call,rule,takes", CASES, ids=IDS)
def test_gradcheck(name, call, rule, takes):
    """Finite differences of the float64 op itself (B=2, T=5, H=1, HV=2, K=3, V=2, chunk 2)."""
    HV = heads_of(rule, 2, 1)
    q, k, v, g, beta = make_inputs(B=2, T=5, H=1, HV=HV, K=3, V=2, dtype=torch.float64,
                                   gate=gate_of(rule), requires_grad=True)
    h0 = make_state(2, HV, 3, 2, dtype=torch.float64, requires_grad=True)
    g_, b_ = used(takes, g, beta)
    inputs = [x for x in (q, k, v, g_, b_, h0) if x is not None]
    names = [n for n, x in zip("q k v g beta h0".split(), (q, k, v, g_, b_, h0)) if x is not None]

    def f(*xs):
        d = dict(zip(names, xs))
        o, s = call(d["q"], d["k"], d["v"], d.get("g"), d.get("beta"), initial_state=d["h0"],
                    output_final_state=True, chunk_size=2)
        return o, s

    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


L2NORM = [c for c in CASES if c[0] not in ("chunk_simple_gla", "chunk_gla", "chunk_linear_attn")]


@pytest.mark.parametrize("name,call,rule,takes", L2NORM, ids=[c[0] for c in L2NORM])
def test_gradients_through_l2norm_in_kernel(name, call, rule, takes):
    """use_qk_l2norm_in_kernel: the library normalises q and k inside its call and its backward
    gives the gradients of the caller's q and k; against autograd through the reference on
    normalised inputs. q and k rows 0.1 to 30 long, so the normalisation's gradient matters."""
    q, k, v, g, beta = make_inputs(T=37, HV=4, K=16, V=12, dtype=torch.float64, gate=gate_of(rule),
                                   normalize_keys=False)
    q = q * 10 ** (2.5 * torch.rand(*q.shape[:3], 1, dtype=torch.float64) - 1)
    k = k * 10 ** (2.5 * torch.rand(*k.shape[:3], 1, dtype=torch.float64) - 1)
    h0 = make_state(2, 4, 16, 12, dtype=torch.float64)
    for x in (q, k, v, g, beta, h0):
        x.requires_grad_(True)
    g_, b_ = used(takes, g, beta)
    inputs = [x for x in (q, k, v, g_, b_, h0) if x is not None]
    do = torch.randn(2, 37, 4, 12, dtype=torch.float64)
    ds = torch.randn(2, 4, 16, 12, dtype=torch.float64)
    got = _grads(call(q, k, v, g, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True),
                 inputs, do, ds)
    n = lambda x: x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)
    want = _grads(reference(rule, n(q), n(k), v, g_, b_, h0=h0), inputs, do, ds)
    for a, b in zip(got, want):
        close(a, b, 1e-9)


def test_strong_gate_gradients():
    q, k, v, g, beta = make_inputs(T=70, dtype=torch.float64, strong=True, requires_grad=True)
    do = torch.randn(2, 70, 4, 12, dtype=torch.float64)
    got = torch.autograd.grad((la.chunk_gated_delta_rule(q, k, v, g, beta)[0] * do).sum(), (q, k, v, g, beta))
    want = torch.autograd.grad((reference("gated_delta", q, k, v, g, beta)[0] * do).sum(), (q, k, v, g, beta))
    for a, b in zip(got, want):
        close(a, b, 1e-9)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_gradients(dtype):
    """bf16 (or fp16) q, k, v and fp32 g, beta: gradients come back in each input's dtype."""
    q, k, v, g, beta = make_inputs(T=40, dtype=torch.float32)
    qb, kb, vb = (x.to(dtype).requires_grad_() for x in (q, k, v))
    g.requires_grad_()
    beta.requires_grad_()
    o, _ = la.chunk_gated_delta_rule(qb, kb, vb, g, beta, use_qk_l2norm_in_kernel=True)
    do = torch.randn_like(o, dtype=torch.float32)
    got = torch.autograd.grad((o.float() * do).sum(), (qb, kb, vb, g, beta))
    assert [x.dtype for x in got] == [dtype] * 3 + [torch.float32] * 2
    n = lambda x: x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)
    leaves = [x.detach().double().requires_grad_() for x in (qb, kb, vb, g, beta)]
    ro = reference("gated_delta", n(leaves[0]), n(leaves[1]), *leaves[2:])[0]
    want = torch.autograd.grad((ro * do).sum(), leaves)
    for a, b in zip(got, want):
        close(a, b, 2e-2)


def test_grad_of_final_state_only():
    """A loss on the final state alone (o unused): the output gradient is None in autograd."""
    q, k, v, g, beta = make_inputs(dtype=torch.float64, requires_grad=True)
    _, s = la.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
    got = torch.autograd.grad(s.square().sum(), (q, k, v, g, beta), allow_unused=True)
    _, rs = reference("gated_delta", q, k, v, g, beta)
    want = torch.autograd.grad(rs.square().sum(), (q, k, v, g, beta), allow_unused=True)
    assert want[0] is None and (got[0] is None or not got[0].any())   # q does not reach the final state
    for a, b in zip(got[1:], want[1:]):
        close(a, b, 1e-9)


def test_rls_backward_raises():
    q, k, v, g, _ = make_inputs(dtype=torch.float64, requires_grad=True)
    o, _ = la.chunk_rls(q, k, v, g)
    with pytest.raises(NotImplementedError, match="rls"):
        o.sum().backward()
