# SPDX-License-Identifier: MIT
"""chunk_kda and fused_recurrent_kda against the float64 reference: odd T, K != V, grouped value
heads, packed sequences, initial and final states, strong per-key gates, fla's in-kernel gate and
beta options (forward and gradients); bad shapes name the argument. The common gradient tests
(test_backward.py) run both calls too."""

import pytest
import torch
import torch.nn.functional as F

import linattn.torch as la
from conftest import close, make_inputs, make_state
from reference import reference

CALLS = [("chunk", la.chunk_kda), ("recurrent", la.fused_recurrent_kda)]


@pytest.mark.parametrize("form,call", CALLS, ids=[c[0] for c in CALLS])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
@pytest.mark.parametrize("strong", [False, True])
def test_matches_reference(form, call, dtype, tol, strong):
    q, k, v, g, beta = make_inputs(T=37, HV=4, K=16, V=12, dtype=dtype, gate="key", strong=strong)
    g[..., ::3] = 0.0  # some key dimensions never forget
    h0 = make_state(2, 4, 16, 12, dtype=dtype)
    o, s = call(q, k, v, g, beta, initial_state=h0, output_final_state=True, chunk_size=32)
    ro, rs = reference("kda", q, k, v, g, beta, h0=h0)
    close(o, ro, tol)
    close(s, rs, tol)


@pytest.mark.parametrize("form,call", CALLS, ids=[c[0] for c in CALLS])
def test_packed_sequences(form, call):
    cu = torch.tensor([0, 5, 5, 86, 100], dtype=torch.int64)
    q, k, v, g, beta = make_inputs(B=1, T=100, HV=2, K=8, V=10, dtype=torch.float64, gate="key")
    h0 = make_state(4, 2, 8, 10, dtype=torch.float64)
    o, s = call(q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    ro, rs = reference("kda", q, k, v, g, beta, h0=h0, cu_seqlens=cu)
    close(o, ro, 1e-10)
    close(s, rs, 1e-10)


def test_in_kernel_gate_beta_and_l2norm():
    """use_gate_in_kernel: g = -exp(A_log) softplus(g + dt_bias); beta through a sigmoid; q, k
    L2-normalised inside: the same as passing the transformed tensors."""
    q, k, v, raw, b = make_inputs(T=20, HV=4, K=8, V=6, dtype=torch.float64, gate="key", normalize_keys=False)
    A_log, dt_bias = torch.randn(4, dtype=torch.float64), torch.randn(4 * 8, dtype=torch.float64)
    o, _ = la.chunk_kda(q, k, v, raw, b, use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
                        use_beta_sigmoid_in_kernel=True, use_qk_l2norm_in_kernel=True)
    g = -torch.exp(A_log).view(4, 1) * F.softplus(raw + dt_bias.view(4, 8))
    unit = lambda x: x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)  # fla's l2norm (eps 1e-6)
    ro, _ = reference("kda", unit(q), unit(k), v, g, torch.sigmoid(b))
    close(o, ro, 1e-8)


def test_bad_shapes_are_named():
    q, k, v, g, beta = make_inputs(T=9, HV=4, K=8, V=6, dtype=torch.float64, gate="key")
    with pytest.raises(ValueError, match="'g'"):
        la.chunk_kda(q, k, v, g[..., 0], beta)
    with pytest.raises(ValueError, match="'chunk_size'.*32 or 64"):  # as fla's chunk_kda
        la.chunk_kda(q, k, v, g, beta, chunk_size=16)


def _grads(outputs, leaves, do, ds):
    o, s = outputs
    return torch.autograd.grad((o.double() * do).sum() + (s.double() * ds).sum(), leaves)


@pytest.mark.parametrize("form,call", CALLS, ids=[c[0] for c in CALLS])
def test_gradients_of_fla_options_and_strong_gates(form, call):
    """Gradients through the in-kernel gate (to A_log and dt_bias), beta's sigmoid and the
    in-kernel L2 norm (raw q, k of very different lengths), then with strong per-key gates (log
    decays of -12 to -4, some key dimensions never forgetting) and beta up to 2: against
    autograd through the float64 reference."""
    q, k, v, raw, b = make_inputs(T=45, HV=4, K=8, V=6, dtype=torch.float64, gate="key", normalize_keys=False)
    k = k * 10 ** (2 * torch.rand(*k.shape[:3], 1, dtype=torch.float64) - 1)
    A_log, dt_bias = torch.randn(4, dtype=torch.float64), torch.randn(4 * 8, dtype=torch.float64)
    h0 = make_state(2, 4, 8, 6, dtype=torch.float64)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, raw, b, A_log, dt_bias, h0)]
    do, ds = torch.randn(2, 45, 4, 6, dtype=torch.float64), torch.randn(2, 4, 8, 6, dtype=torch.float64)
    lq, lk, lv, lraw, lb, la_log, ldt, lh0 = leaves
    got = _grads(call(lq, lk, lv, lraw, lb, use_gate_in_kernel=True, A_log=la_log, dt_bias=ldt,
                      use_beta_sigmoid_in_kernel=True, use_qk_l2norm_in_kernel=True, initial_state=lh0,
                      output_final_state=True), leaves, do, ds)
    unit = lambda x: x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)
    g = -torch.exp(la_log).view(4, 1) * F.softplus(lraw + ldt.view(4, 8))
    want = _grads(reference("kda", unit(lq), unit(lk), lv, g, torch.sigmoid(lb), h0=lh0), leaves, do, ds)
    for a, w in zip(got, want):
        close(a, w, 1e-9)

    q, k, v, g, b = make_inputs(T=70, HV=4, K=8, V=6, dtype=torch.float64, gate="key", strong=True, beta_max=2.0)
    g[..., ::3] = 0.0
    leaves = [x.requires_grad_() for x in (q, k, v, g, b, h0.clone())]
    do, ds = torch.randn(2, 70, 4, 6, dtype=torch.float64), torch.randn(2, 4, 8, 6, dtype=torch.float64)
    got = _grads(call(*leaves[:5], initial_state=leaves[5], output_final_state=True), leaves, do, ds)
    want = _grads(reference("kda", *leaves[:5], h0=leaves[5]), leaves, do, ds)
    for a, w in zip(got, want):
        close(a, w, 1e-9)


def test_safe_gate_and_a_log_shapes():
    """lower_bound (fla's safe gate): g = lower_bound * sigmoid(exp(A_log) (g + dt_bias)), or
    without A_log lower_bound * sigmoid(g + dt_bias); A_log taken in any shape of HV elements
    (fla's tests pass [1, 1, HV, 1]); a wrong count names the argument."""
    q, k, v, raw, b = make_inputs(T=20, HV=4, K=8, V=6, dtype=torch.float64, gate="key")
    A_log, dt_bias = torch.rand(4, dtype=torch.float64), torch.randn(4 * 8, dtype=torch.float64)
    x = raw + dt_bias.view(4, 8)
    for a_log, g in ((A_log, -5.0 * torch.sigmoid(torch.exp(A_log).view(4, 1) * x)), (None, -5.0 * torch.sigmoid(x))):
        o, _ = la.chunk_kda(q, k, v, raw, b, use_gate_in_kernel=True, A_log=a_log, dt_bias=dt_bias, lower_bound=-5.0)
        close(o, reference("kda", q, k, v, g, b)[0], 1e-10)
    o, _ = la.fused_recurrent_kda(q, k, v, raw, b, use_gate_in_kernel=True, A_log=A_log.view(1, 1, 4, 1),
                                  dt_bias=dt_bias)
    g = -torch.exp(A_log).view(4, 1) * F.softplus(x)
    close(o, reference("kda", q, k, v, g, b)[0], 1e-10)
    with pytest.raises(ValueError, match="'A_log'"):
        la.chunk_kda(q, k, v, raw, b, use_gate_in_kernel=True, A_log=A_log[:3], dt_bias=dt_bias)
    with pytest.raises(ValueError, match="'dt_bias'"):
        la.chunk_kda(q, k, v, raw, b, use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias[:5])


@pytest.mark.parametrize("call", [la.chunk_kda, la.fused_recurrent_kda, la.chunk_gated_delta_rule])
def test_transpose_state_layout_is_the_deprecated_name(call):
    """transpose_state_layout=True works as state_v_first=True with a DeprecationWarning; both
    names at once raise ValueError (as fla does)."""
    gate = "key" if call is not la.chunk_gated_delta_rule else "scalar"
    q, k, v, g, b = make_inputs(T=10, HV=4, K=8, V=6, dtype=torch.float64, gate=gate)
    h0 = make_state(2, 4, 6, 8, dtype=torch.float64)  # [N, HV, V, K]
    want_o, want_s = call(q, k, v, g, b, initial_state=h0, output_final_state=True, state_v_first=True)
    with pytest.warns(DeprecationWarning, match="state_v_first"):
        o, s = call(q, k, v, g, b, initial_state=h0, output_final_state=True, transpose_state_layout=True)
    close(o, want_o, 1e-12)
    close(s, want_s, 1e-12)
    with pytest.raises(ValueError, match="'state_v_first'"):
        call(q, k, v, g, b, state_v_first=True, transpose_state_layout=True)


@pytest.mark.parametrize("chunk_size", [32, 64])
def test_return_intermediate_states(chunk_size):
    """fla's return_intermediate_states (inference): h [B, NT, HV, K, V] holds the state at the
    start of every chunk, the initial state first; packed: [1, sum of NT, HV, K, V]. Each entry
    against the reference's final state on that prefix; state_v_first transposes h too."""
    q, k, v, g, beta = make_inputs(T=100, HV=4, K=8, V=6, dtype=torch.float64, gate="key")
    h0 = make_state(2, 4, 8, 6, dtype=torch.float64)
    with torch.inference_mode():
        o, s, h = la.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                               return_intermediate_states=True, chunk_size=chunk_size)
        o_t, _, h_t = la.chunk_kda(q, k, v, g, beta, initial_state=h0.transpose(-1, -2), state_v_first=True,
                                   return_intermediate_states=True, chunk_size=chunk_size)
    nt = -(-100 // chunk_size)
    assert h.shape == (2, nt, 4, 8, 6) and h.dtype == torch.float64
    ro, rs = reference("kda", q, k, v, g, beta, h0=h0)
    close(o, ro, 1e-10)
    close(s, rs, 1e-10)
    close(h[:, 0], h0, 1e-12)
    for j in range(1, nt):
        t = j * chunk_size
        close(h[:, j], reference("kda", q[:, :t], k[:, :t], v[:, :t], g[:, :t], beta[:, :t], h0=h0)[1], 1e-10)
    close(o_t, o, 1e-12)
    close(h_t, h.transpose(-1, -2), 1e-12)

    cu = torch.tensor([0, 70, 70, 71, 170])  # an empty and a one-token sequence
    q, k, v, g, beta = make_inputs(B=1, T=170, HV=4, K=8, V=6, dtype=torch.float64, gate="key")
    with torch.no_grad():
        _, s, h = la.chunk_kda(q, k, v, g, beta, cu_seqlens=cu, output_final_state=True,
                               return_intermediate_states=True, chunk_size=chunk_size)
    counts = [-(-n // chunk_size) for n in (70, 0, 1, 99)]
    assert h.shape == (1, sum(counts), 4, 8, 6)
    row = 0
    for n, c in enumerate(counts):
        a = int(cu[n])
        for j in range(c):
            t = a + j * chunk_size
            want = torch.zeros(4, 8, 6, dtype=torch.float64) if j == 0 else \
                reference("kda", q[:, a:t], k[:, a:t], v[:, a:t], g[:, a:t], beta[:, a:t])[1][0]
            close(h[0, row], want, 1e-10)  # zeros first (no initial state): exactly
            row += 1
    with torch.no_grad():  # fla's fused_recurrent_kda takes the flag and ignores it
        assert len(la.fused_recurrent_kda(q, k, v, g, beta, cu_seqlens=cu, return_intermediate_states=True)) == 2
    with pytest.raises(ValueError, match="'return_intermediate_states'.*inference"):
        la.chunk_kda(q.requires_grad_(), k, v, g, beta, cu_seqlens=cu, return_intermediate_states=True)
