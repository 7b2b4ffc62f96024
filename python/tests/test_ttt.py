# SPDX-License-Identifier: MIT
"""chunk_ttt_linear and fused_recurrent_ttt_linear (forward only) against a float64 reference
written here from the rule's definition, with the inner loss's gradient taken by autograd: odd T
(not a multiple of the mini-batch), grouped value heads, packed sequences, carried states and
an unfinished mini-batch continued exactly, custom tau, 16-bit inputs; bad arguments and the
backward are refused with clear errors."""

import pytest
import torch
import torch.nn.functional as F

import linattn.torch as la
from conftest import close

CALLS = [("chunk", la.chunk_ttt_linear), ("recurrent", la.fused_recurrent_ttt_linear)]
IDS = [c[0] for c in CALLS]


def _layer_norm(z, gam, bet):
    mu = z.mean()
    var = ((z - mu) ** 2).mean()
    return gam * (z - mu) / torch.sqrt(var + 1e-6) + bet


def reference(q, k, v, eta, gam, bet, mini_batch, tau=None, scale=1.0, w0=None, b0=None, cu_seqlens=None):
    """o [B, T, HV, D] and the weights and bias after each sequence's last token, in float64.
    Per mini-batch: every token's gradient at the mini-batch's start weights; token i reads the
    weights W_0 - tau_i sum_{j<=i} eta_j k_j g_j^T (tau_i = 1/i by default)."""
    q, k, v, eta, gam, bet = (x.detach().double() for x in (q, k, v, eta, gam, bet))
    B, T, H, D = q.shape
    HV = v.shape[2]
    spans = [(b, 0, T) for b in range(B)] if cu_seqlens is None else \
        [(0, int(cu_seqlens[n]), int(cu_seqlens[n + 1])) for n in range(len(cu_seqlens) - 1)]
    o = torch.zeros(B, T, HV, D, dtype=torch.float64)
    W_end = torch.zeros(len(spans), HV, D, D, dtype=torch.float64)
    b_end = torch.zeros(len(spans), HV, D, dtype=torch.float64)
    for n, (b, s, e) in enumerate(spans):
        for hv in range(HV):
            h = hv // (HV // H)
            W = torch.zeros(D, D, dtype=torch.float64) if w0 is None else w0[n, hv].double().clone()
            bias = torch.zeros(D, dtype=torch.float64) if b0 is None else b0[n, hv].double().clone()
            for start in range(s, e, mini_batch):
                accW, accb = torch.zeros(D, D, dtype=torch.float64), torch.zeros(D, dtype=torch.float64)
                Wi, bi = W, bias
                for i, t in enumerate(range(start, min(start + mini_batch, e)), 1):
                    kt, vt = k[b, t, h], v[b, t, hv]
                    z = (W.T @ kt + bias).requires_grad_()
                    loss = 0.5 * ((kt + _layer_norm(z, gam[hv], bet[hv]) - vt) ** 2).sum()
                    (g,) = torch.autograd.grad(loss, z)
                    accW += eta[b, t, hv] * torch.outer(kt, g)
                    accb += eta[b, t, hv] * g
                    ti = 1.0 / i if tau is None else float(tau[i - 1])
                    Wi, bi = W - ti * accW, bias - ti * accb
                    qt = scale * q[b, t, h]
                    o[b, t, hv] = qt + _layer_norm(Wi.T @ qt + bi, gam[hv], bet[hv])
                W, bias = Wi, bi
            W_end[n, hv], b_end[n, hv] = W, bias
    return o, W_end, b_end


def make(B=2, T=23, H=2, HV=4, D=8, dtype=torch.float64):
    q = torch.randn(B, T, H, D, dtype=torch.float64)
    k = F.normalize(torch.randn(B, T, H, D, dtype=torch.float64), dim=-1)
    v = torch.randn(B, T, HV, D, dtype=torch.float64)
    eta = 0.05 + 0.45 * torch.rand(B, T, HV, dtype=torch.float64)
    gam = 1.0 + 0.3 * torch.randn(HV, D, dtype=torch.float64)
    bet = 0.2 * torch.randn(HV, D, dtype=torch.float64)
    return [x.to(dtype) for x in (q, k, v, eta, gam, bet)]


@pytest.mark.parametrize("form,call", CALLS, ids=IDS)
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-4)])
def test_matches_reference(form, call, dtype, tol):
    q, k, v, eta, gam, bet = make(dtype=dtype)
    w0 = (0.3 * torch.randn(2, 4, 8, 8, dtype=torch.float64)).to(dtype)
    b0 = (0.3 * torch.randn(2, 4, 8, dtype=torch.float64)).to(dtype)
    o, _ = call(q, k, v, eta, gam, bet, mini_batch=4, initial_state=(w0, b0), scale=0.7, chunk_size=8)
    ro, _, _ = reference(q, k, v, eta, gam, bet, 4, scale=0.7, w0=w0, b0=b0)
    close(o, ro, tol)


@pytest.mark.parametrize("form,call", CALLS, ids=IDS)
def test_final_weights_and_custom_tau(form, call):
    """T a multiple of the mini-batch: the final (W, b) are the weights after the last token and the
    cache is empty; tau replaces 1/i."""
    q, k, v, eta, gam, bet = make(T=24)
    tau = torch.tensor([1.0, 0.6, 0.45, 0.3], dtype=torch.float64)
    o, (W, b, cache) = call(q, k, v, eta, gam, bet, mini_batch=4, tau=tau, output_final_state=True)
    ro, rW, rb = reference(q, k, v, eta, gam, bet, 4, tau=tau)
    close(o, ro, 1e-10)
    close(W, rW, 1e-10)
    close(b, rb, 1e-10)
    assert cache.shape == (2, 4, 10, 8) and torch.all(cache[:, :, 9, 0] == 0)


@pytest.mark.parametrize("form,call", CALLS, ids=IDS)
def test_continues_an_unfinished_mini_batch(form, call):
    """A sequence cut inside a mini-batch and continued from the returned (W, b, cache) gives the
    uninterrupted run's outputs and final state."""
    q, k, v, eta, gam, bet = make(T=29)
    whole, s_whole = call(q, k, v, eta, gam, bet, mini_batch=4, output_final_state=True)
    cut = 10  # 2 tokens into the third mini-batch
    first, s = call(*(x[:, :cut] for x in (q, k, v, eta)), gam, bet, mini_batch=4, output_final_state=True)
    assert torch.all(s[2][:, :, 9, 0] == 2)  # the cache's position row
    second, s_end = call(*(x[:, cut:] for x in (q, k, v, eta)), gam, bet, mini_batch=4, initial_state=s,
                         output_final_state=True)
    close(torch.cat([first, second], dim=1), whole, 1e-12)
    for a, b in zip(s_end, s_whole):
        close(a, b, 1e-12)


def test_forms_agree_on_packed_sequences():
    cu = torch.tensor([0, 7, 8, 8, 30], dtype=torch.int64)
    q, k, v, eta, gam, bet = make(B=1, T=30, H=1, HV=2, D=6)
    w0 = 0.3 * torch.randn(4, 2, 6, 6, dtype=torch.float64)
    ro, _, _ = reference(q, k, v, eta, gam, bet, 3, w0=w0, cu_seqlens=cu)
    for call in (la.chunk_ttt_linear, la.fused_recurrent_ttt_linear):
        o, _ = call(q, k, v, eta, gam, bet, mini_batch=3, initial_state=w0, cu_seqlens=cu)
        close(o, ro, 1e-10)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_inputs(dtype):
    """16-bit q, k, v with float32 eta and LayerNorm parameters: o in q's dtype, states float32."""
    q, k, v, eta, gam, bet = make(dtype=torch.float32)
    qb, kb, vb = (x.to(dtype) for x in (q, k, v))
    o, (W, b, c) = la.chunk_ttt_linear(qb, kb, vb, eta, gam, bet, mini_batch=4, output_final_state=True)
    assert o.dtype == dtype and W.dtype == b.dtype == c.dtype == torch.float32
    ro, _, _ = reference(qb, kb, vb, eta, gam, bet, 4)
    close(o, ro, 2e-2)


def test_bad_arguments_name_themselves():
    q, k, v, eta, gam, bet = make()
    with pytest.raises(ValueError, match="'eta'"):
        la.chunk_ttt_linear(q, k, v, eta[:, :, :2], gam, bet, mini_batch=4)
    with pytest.raises(ValueError, match="'mini_batch'"):
        la.chunk_ttt_linear(q, k, v, eta, gam, bet, mini_batch=0)
    with pytest.raises(ValueError, match="'initial_state'"):
        la.chunk_ttt_linear(q, k, v, eta, gam, bet, initial_state=(1, 2, 3, 4))
    with pytest.raises(ValueError, match="'chunk_size'"):
        la.chunk_ttt_linear(q, k, v, eta, gam, bet, mini_batch=4, chunk_size=6)
    with pytest.raises(ValueError, match="'ln_weight'"):
        la.chunk_ttt_linear(q, k, v, eta, gam[:, :5], bet, mini_batch=4)


def test_backward_is_refused():
    q, k, v, eta, gam, bet = make()
    q.requires_grad_(True)
    o, _ = la.chunk_ttt_linear(q, k, v, eta, gam, bet, mini_batch=4)
    with pytest.raises(NotImplementedError, match="no backward"):
        o.sum().backward()


def test_custom_op_schema_and_fake_tensors():
    q, k, v, eta, gam, bet = make(dtype=torch.float32)
    args = ("chunk", q, k, v, eta, gam, bet, None, 4, None, None, None, None, 1.0, 8, True)
    torch.library.opcheck(torch.ops.linattn.ttt_forward.default, args,
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA tests run on a GPU machine")
def test_cuda_tensors_run_on_host_copies():
    """No device kernel: CUDA tensors run the CPU kernels on host copies, with a warning, and the
    results come back on the device."""
    q, k, v, eta, gam, bet = make(dtype=torch.float32)
    want, (W, b, c) = la.chunk_ttt_linear(q, k, v, eta, gam, bet, mini_batch=4, output_final_state=True)
    with pytest.warns(RuntimeWarning, match="host copies"):
        got, state = la.chunk_ttt_linear(*(x.cuda() for x in (q, k, v, eta, gam, bet)), mini_batch=4,
                                         output_final_state=True)
    assert got.is_cuda and all(x.is_cuda for x in state)
    assert torch.equal(got.cpu(), want)
    for a, e in zip(state, (W, b, c)):
        assert torch.equal(a.cpu(), e)
