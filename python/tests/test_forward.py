# SPDX-License-Identifier: MIT
"""Forward results of every public function against the float64 references (reference.py):
odd T, K != V, grouped value heads, packed batches, initial and final states, bf16 and fp16 inputs."""

import subprocess
import sys

import pytest
import torch

import linattn.torch as la
from linattn.torch import _backend
from calls import CASES, IDS, gate_of, heads_of, used
from conftest import close, make_inputs, make_state
from reference import reference


@pytest.mark.parametrize("name,call,rule,takes", CASES, ids=IDS)
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
def test_matches_reference(name, call, rule, takes, dtype, tol):
    HV = heads_of(rule)          # fla's GLA has no grouped value heads
    q, k, v, g, beta = make_inputs(T=37, HV=HV, K=16, V=12, dtype=dtype, gate=gate_of(rule))
    h0 = make_state(2, HV, 16, 12, dtype=dtype)
    o, s = call(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    ro, rs = reference(rule, q, k, v, *used(takes, g, beta), h0=h0)
    assert o.dtype == dtype and s.dtype == dtype
    assert o.shape == v.shape and s.shape == h0.shape
    close(o, ro, tol)
    close(s, rs, tol)


@pytest.mark.parametrize("name,call,rule,takes", CASES, ids=IDS)
def test_packed_sequences(name, call, rule, takes):
    """cu_seqlens with B = 1: sequences of odd lengths, one empty, one longer than a chunk."""
    HV = heads_of(rule)
    cu = torch.tensor([0, 5, 5, 86, 100], dtype=torch.int64)
    q, k, v, g, beta = make_inputs(B=1, T=100, HV=HV, K=8, V=10, dtype=torch.float64, gate=gate_of(rule))
    h0 = make_state(4, HV, 8, 10, dtype=torch.float64)
    o, s = call(q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    ro, rs = reference(rule, q, k, v, *used(takes, g, beta), h0=h0, cu_seqlens=cu)
    close(o, ro, 1e-10)
    close(s, rs, 1e-10)
    o32, _ = call(q, k, v, g, beta, initial_state=h0, cu_seqlens=cu.to(torch.int32))
    close(o32, ro, 1e-10)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name,call,rule,takes", CASES, ids=IDS)
def test_16bit_inputs(name, call, rule, takes, dtype):
    """fla's mixed precision: bf16 (or fp16) q, k, v with fp32 gates, read by the CPU kernels as
    they are; o in q's dtype, the state in fp32."""
    HV = heads_of(rule)
    q, k, v, g, beta = make_inputs(T=33, HV=HV, K=16, V=16, dtype=torch.float32, gate=gate_of(rule))
    qb, kb, vb = (x.to(dtype) for x in (q, k, v))
    assert _backend.runs_16bit(rule, "chunk", qb, kb, vb, 64)   # no float32 copy on the CPU
    o, s = call(qb, kb, vb, g, beta, output_final_state=True)
    assert o.dtype == dtype and s.dtype == torch.float32
    ro, rs = reference(rule, qb, kb, vb, *used(takes, g, beta))
    close(o, ro, 1e-2)     # bf16 rounding of o
    close(s, rs, 1e-5)


def test_no_final_state_unless_asked():
    q, k, v, g, beta = make_inputs()
    o, s = la.chunk_gated_delta_rule(q, k, v, g, beta)
    assert s is None and o.shape == v.shape


def test_strong_gates():
    """Log gates of -4 to -12 per token: decay factors down to 6e-6, the chunk-local products far
    below float range inside a 64-token chunk."""
    q, k, v, g, beta = make_inputs(T=130, dtype=torch.float32, strong=True)
    o, s = la.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
    ro, rs = reference("gated_delta", q, k, v, g, beta)
    close(o, ro, 1e-5)
    close(s, rs, 1e-5)
    o, s = la.chunk_simple_gla(q, k, v, g, output_final_state=True)
    close(o, reference("scalar_decay", q, k, v, g)[0], 1e-5)


def test_l2norm_in_kernel():
    q, k, v, g, beta = make_inputs(dtype=torch.float64, normalize_keys=False)
    o, _ = la.chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
    n = lambda x: x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)
    close(o, reference("gated_delta", n(q), n(k), v, g, beta)[0], 1e-10)


def test_beta_sigmoid_and_gate_in_kernel():
    """fla's in-kernel activations: beta = sigmoid(b) (x2 with allow_neg_eigval) and
    g = -exp(A_log) softplus(g + dt_bias)."""
    q, k, v, g, beta = make_inputs(dtype=torch.float64)
    A_log, dt_bias = torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    o, _ = la.chunk_gated_delta_rule(q, k, v, g, beta, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
                                     use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias)
    gg = -torch.exp(A_log) * torch.nn.functional.softplus(g + dt_bias)
    close(o, reference("gated_delta", q, k, v, gg, 2 * torch.sigmoid(beta))[0], 1e-10)
    o2, _ = la.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, use_beta_sigmoid_in_kernel=True,
                                                allow_neg_eigval=True, use_gate_in_kernel=True, A_log=A_log,
                                                dt_bias=dt_bias)
    close(o2, o, 1e-10)


def test_layouts_head_first_and_state_v_first():
    q, k, v, g, beta = make_inputs(dtype=torch.float64)
    h0 = make_state(2, 4, 16, 12, dtype=torch.float64)
    o, s = la.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    t = lambda x: x.transpose(1, 2)
    o2, s2 = la.chunk_gated_delta_rule(t(q), t(k), t(v), t(g), t(beta), initial_state=h0.transpose(-1, -2),
                                       output_final_state=True, head_first=True, state_v_first=True)
    close(t(o2), o, 1e-12)
    close(s2.transpose(-1, -2), s, 1e-12)


def test_defaults_and_delta_rule_limits():
    """fused_recurrent_delta_rule's beta defaults to ones; without g the gated rule is the delta
    rule; chunk_simple_gla without gates is linear attention; g_gamma is a per-head constant."""
    q, k, v, g, beta = make_inputs(dtype=torch.float64)
    ones = torch.ones_like(beta)
    close(la.fused_recurrent_delta_rule(q, k, v)[0], reference("delta", q, k, v, beta=ones)[0], 1e-10)
    close(la.fused_recurrent_gated_delta_rule(q, k, v, beta=beta)[0], reference("delta", q, k, v, beta=beta)[0], 1e-10)
    close(la.chunk_simple_gla(q, k, v)[0], reference("hebbian", q, k, v)[0], 1e-10)
    gamma = -torch.rand(4, dtype=torch.float64)
    close(la.chunk_simple_gla(q, k, v, g_gamma=gamma)[0],
          reference("scalar_decay", q, k, v, g=gamma.expand(beta.shape))[0], 1e-10)
    close(la.chunk_simple_gla(q, k, v, g, g_gamma=gamma)[0],
          reference("scalar_decay", q, k, v, g=g + gamma)[0], 1e-10)


def test_scale_argument():
    q, k, v, g, beta = make_inputs(dtype=torch.float64)
    close(la.chunk_gated_delta_rule(q, k, v, g, beta, scale=0.3)[0],
          reference("gated_delta", q, k, v, g, beta, scale=0.3)[0], 1e-10)


def test_linear_attn_normalized():
    """normalize=True: o_t / (scale q_t . z_t + 1e-10), z_t the running key sum; the key sum is
    returned with the state and carried in through initial_state=(state, z)."""
    q, k, v, _, _ = make_inputs(dtype=torch.float64, HV=2)
    k = k.abs() + 0.1                     # positive feature maps, as normalised linear attention uses
    q = q.abs() + 0.1
    o, (s, z) = la.chunk_linear_attn(q, k, v, output_final_state=True)
    ro, rs = reference("hebbian", q, k, v)
    den = (q * 16 ** -0.5 * k.cumsum(1)).sum(-1, keepdim=True) + 1e-10
    close(o, ro / den, 1e-10)
    close(s, rs, 1e-10)
    close(z, k.sum(1, keepdim=True), 1e-12)
    # two halves with the carried state and key sum give the whole
    a, b = slice(0, 20), slice(20, None)
    o1, (s1, z1) = la.chunk_linear_attn(q[:, a], k[:, a], v[:, a], output_final_state=True)
    o2, (s2, z2) = la.chunk_linear_attn(q[:, b], k[:, b], v[:, b], initial_state=(s1, z1), output_final_state=True)
    close(torch.cat([o1, o2], 1), o, 1e-10)
    close(z2, z, 1e-12)
    # packed
    cu = torch.tensor([0, 20, 37])
    qp, kp, vp = (x.reshape(1, -1, *x.shape[2:]) for x in (q[:1], k[:1], v[:1]))
    op, (sp, zp) = la.chunk_linear_attn(qp[:, :37], kp[:, :37], vp[:, :37], cu_seqlens=cu, output_final_state=True)
    close(op[:, :20], o1[:1], 1e-10)
    close(zp[0], z1[0], 1e-12)


def test_rls_chunks_that_forget_strongly():
    """float32 chunk_rls with forgetting factors ~0.84 (a chunk of 64 forgets ~1e-5): as accurate
    as the float32 recurrence, against the float64 recurrence."""
    torch.manual_seed(5)
    q, k, v = torch.randn(1, 203, 2, 8, dtype=torch.float64), 0.5 * torch.randn(1, 203, 2, 8, dtype=torch.float64), \
        torch.randn(1, 203, 2, 6, dtype=torch.float64)
    g = torch.nn.functional.logsigmoid(torch.randn(1, 203, 2, dtype=torch.float64) + 2)
    ro, rs = la.fused_recurrent_rls(q, k, v, g, output_final_state=True)
    for chunk_size in (16, 64):
        o, s = la.chunk_rls(*(x.float() for x in (q, k, v, g)), chunk_size=chunk_size, output_final_state=True)
        close(o.double(), ro, 1e-4)
        close(s.double(), rs, 1e-4)


def test_rls_forward():
    """RLS (forward only) against the Sherman-Morrison recurrence, with forgetting and a carried
    state [N, HV, K, V + K]."""
    q, k, v, g, _ = make_inputs(T=41, K=8, V=6, dtype=torch.float64)
    g = g * 0.05                           # forgetting factors near 1
    for call in (la.chunk_rls, la.fused_recurrent_rls):
        o, s = call(q, k, v, g, delta=2.0, output_final_state=True)
        ro, rs = reference("rls", q, k, v, g=g, delta=2.0)
        assert s.shape == (2, 4, 8, 6 + 8)
        close(o, ro, 1e-9)
        close(s, rs, 1e-9)
        o2, _ = call(q[:, 20:], k[:, 20:], v[:, 20:], g[:, 20:], initial_state=call(
            q[:, :20], k[:, :20], v[:, :20], g[:, :20], delta=2.0, output_final_state=True)[1])
        close(o2, ro[:, 20:], 1e-9)


@pytest.mark.parametrize("setting,tf32", [
    ("pass", False),
    ("torch.set_float32_matmul_precision('high')", True),
    ("torch.set_float32_matmul_precision('high'); torch.set_float32_matmul_precision('highest')", False),
    ("torch.backends.cuda.matmul.allow_tf32 = True", True),
    ("torch.backends.cuda.matmul.fp32_precision = 'tf32'", True),
    ("torch.backends.fp32_precision = 'tf32'; torch.backends.cuda.matmul.fp32_precision = 'ieee'", False),
])
def test_tf32_setting_is_read_from_every_torch_api(setting, tf32):
    """The CUDA float32 forward's product precision follows torch's TF32 setting however it was
    made, and reading it never raises (torch >= 2.9 raises on allow_tf32 once its new
    fp32_precision API has been used). Each setting in a fresh interpreter: they are global and
    some cannot be undone."""
    if "fp32_precision" in setting and not hasattr(torch.backends, "fp32_precision"):
        pytest.skip(f"torch {torch.__version__} has no fp32_precision API (added in torch 2.9)")
    code = f"import torch\n{setting}\nfrom linattn.torch import _backend\nprint(_backend._tf32())"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(tf32)
