# SPDX-License-Identifier: MIT
"""CUDA tensors: the forward and backward through linattn::cuda (K, V in {64, 128}) against the
CPU, on torch's current stream; other shapes on host copies. Skipped without a GPU."""

import warnings

import pytest
import torch

import linattn.torch as la
from calls import CASES, IDS, gate_of, heads_of
from conftest import close, make_inputs, make_state
from reference import reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device: the CUDA tests run on a GPU machine (docs/python.md)")


def _cuda(xs):
    return [x.cuda() for x in xs]


def test_cuda_module_built():
    assert la.cuda_available(), "linattn._cuda was not built (no nvcc when the package was installed?)"


@pytest.mark.parametrize("name,call,rule,takes", CASES, ids=IDS)
@pytest.mark.parametrize("K,V", [(64, 64), (128, 64), (64, 128)])
def test_forward_matches_cpu(name, call, rule, takes, K, V):
    HV = heads_of(rule)
    q, k, v, g, beta = make_inputs(T=150, HV=HV, K=K, V=V, gate=gate_of(rule))
    h0 = make_state(2, HV, K, V)
    want_o, want_s = call(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # the rules without CUDA kernels say they copy
        o, s = call(*_cuda((q, k, v, g, beta)), initial_state=h0.cuda(), output_final_state=True)
    assert o.is_cuda and s.is_cuda
    close(o.cpu(), want_o, 2e-4)
    close(s.cpu(), want_s, 2e-4)


def test_packed_and_stream():
    """cu_seqlens on the device, a side stream: results equal the CPU's."""
    cu = torch.tensor([0, 70, 71, 300])
    q, k, v, g, beta = make_inputs(B=1, T=300, K=64, V=64)
    want, ws = la.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, output_final_state=True)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        o, s = la.chunk_gated_delta_rule(*_cuda((q, k, v, g, beta)), cu_seqlens=cu.cuda(), output_final_state=True)
    side.synchronize()
    close(o.cpu(), want, 2e-4)
    close(s.cpu(), ws, 2e-4)


def test_bf16_on_cuda():
    q, k, v, g, beta = make_inputs(T=100, K=128, V=128)
    qb, kb, vb = (x.to(torch.bfloat16) for x in (q, k, v))
    want, _ = la.chunk_gated_delta_rule(qb, kb, vb, g, beta)
    o, s = la.chunk_gated_delta_rule(*_cuda((qb, kb, vb, g, beta)), output_final_state=True)
    assert o.dtype == torch.bfloat16 and s.dtype == torch.float32
    close(o.cpu(), want, 2e-2)


def test_tf32_follows_torch_flag():
    """float32 chunk forwards on CUDA: fp32-accurate products by default; one TF32 product per
    step (linattn::options::precision = tf32) while torch allows TF32 matmuls
    (set_float32_matmul_precision("high")), within fp16's 1e-2 of the CPU's result and clearly
    less accurate than the default."""
    q, k, v, g, beta = make_inputs(T=150, HV=4, K=128, V=64)
    want, _ = la.chunk_gated_delta_rule(q, k, v, g, beta)
    try:
        torch.set_float32_matmul_precision("highest")
        exact, _ = la.chunk_gated_delta_rule(*_cuda((q, k, v, g, beta)))
        torch.set_float32_matmul_precision("high")
        fast, _ = la.chunk_gated_delta_rule(*_cuda((q, k, v, g, beta)))
    finally:
        torch.set_float32_matmul_precision("highest")
    close(exact.cpu(), want, 2e-4)
    close(fast.cpu(), want, 1e-2)
    err = lambda o: ((o.cpu().double() - want.double()).abs().max() / want.abs().max()).item()
    assert 10 * err(exact) < err(fast)


_CUDA_RULES = ("hebbian", "scalar_decay", "delta", "gated_delta", "longhorn")


@pytest.mark.parametrize("name,call,rule,takes", [c for c in CASES if c[2] in _CUDA_RULES],
                         ids=[c[0] for c in CASES if c[2] in _CUDA_RULES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("gates", ["float32", "same"])
def test_16bit_on_the_device(name, call, rule, takes, dtype, gates):
    """16-bit q, k, v go to the device kernels as they are (no conversion, no host copy), with
    g and beta in float32 (fla's mixed precision) or in q's dtype: o in q's dtype, the state in
    float32, gradients in each input's dtype, all close to the CPU's float32 results on the same
    rounded values. T = 150 with an initial state, K != V, HV = 4."""
    q, k, v, g, beta = make_inputs(T=150, HV=4, K=64, V=128)
    q, k, v = (x.to(dtype) for x in (q, k, v))
    if gates == "same":
        g, beta = g.to(dtype), beta.to(dtype)
    h0 = make_state(2, 4, 64, 128)
    leaves = [x.float().requires_grad_() for x in (q, k, v, g, beta, h0)]   # the same values, float32
    dev = [x.cuda().requires_grad_() for x in (q, k, v, g, beta, h0)]

    def run(xs):
        return call(*xs[:5], initial_state=xs[5], output_final_state=True)

    def loss(o, s):
        return o.float().square().sum() + (s * s.detach().cos()).sum()

    want_o, want_s = run(leaves)
    want = torch.autograd.grad(loss(want_o, want_s), leaves, allow_unused=True)
    la._backend._warned.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        o, s = run(dev)
        got = torch.autograd.grad(loss(o, s), dev, allow_unused=True)
    assert not [w for w in seen if "host copies" in str(w.message)], [str(w.message) for w in seen]
    assert o.dtype == dtype and s.dtype == torch.float32
    close(o.cpu(), want_o, 2e-2)
    close(s.cpu(), want_s, 2e-2)
    for x, a, b in zip(dev, got, want):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.is_cuda and a.dtype == x.dtype
            close(a.cpu(), b, 3e-2)


def test_16bit_gates_are_read_in_full():
    """A float32 gate reaches the kernels with all its bits: bf16 q, k, v with float32 g and
    beta give other outputs than with the same gates rounded to bf16, and those rounded gates
    give the same bits whether they come as bf16 or as float32 tensors (both read as float)."""
    q, k, v, g, beta = make_inputs(B=1, T=300, HV=2, H=2, K=64, V=64)
    qb, kb, vb = (x.to(torch.bfloat16).cuda() for x in (q, k, v))
    g32, b32 = g.float().cuda(), beta.float().cuda()
    g16, b16 = g32.to(torch.bfloat16), b32.to(torch.bfloat16)
    run = lambda gg, bb: la.chunk_gated_delta_rule(qb, kb, vb, gg, bb, output_final_state=True)
    o_full, s_full = run(g32, b32)
    o_rounded, s_rounded = run(g16.float(), b16.float())
    o_bf16, s_bf16 = run(g16, b16)
    assert torch.equal(o_rounded, o_bf16) and torch.equal(s_rounded, s_bf16)
    assert not torch.equal(s_full, s_rounded)


@pytest.mark.parametrize("name,call,rule,takes", CASES, ids=IDS)
def test_backward_on_cuda_tensors(name, call, rule, takes):
    """The CUDA rules' backward runs on the device (no host-copy warning), the others on host
    copies; gradients of every input, the initial state included, land on the device and equal
    the CPU's. T = 150 with an initial state and a final-state gradient; K != V, HV = 4."""
    HV = heads_of(rule)
    q, k, v, g, beta = make_inputs(T=150, HV=HV, K=64, V=128, gate=gate_of(rule))
    h0 = make_state(2, HV, 64, 128)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, g, beta, h0)]
    dev = [x.cuda().requires_grad_() for x in (q, k, v, g, beta, h0)]

    def loss(xs):
        o, s = call(*xs[:5], initial_state=xs[5], output_final_state=True)
        return o.square().sum() + (s * s.detach().cos()).sum()

    want = torch.autograd.grad(loss(leaves), leaves, allow_unused=True)
    la._backend._warned.clear()            # the warnings come once per case and process
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = torch.autograd.grad(loss(dev), dev, allow_unused=True)
    copied = [w for w in seen if "backward" in str(w.message) and "host copies" in str(w.message)]
    if rule in ("hebbian", "scalar_decay", "vector_decay", "delta", "gated_delta", "longhorn", "kda"):
        assert not copied, [str(w.message) for w in copied]
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.is_cuda
            close(a.cpu(), b, 1e-3)


def test_backward_on_cuda_tensors_packed():
    """cu_seqlens on the device with a one-token and an empty sequence: the device backward
    equals the CPU's."""
    cu = torch.tensor([0, 1, 70, 70, 300])
    q, k, v, g, beta = make_inputs(B=1, T=300, K=128, V=64)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, g, beta)]
    dev = [x.cuda().requires_grad_() for x in (q, k, v, g, beta)]
    want = torch.autograd.grad(la.chunk_gated_delta_rule(*leaves, cu_seqlens=cu)[0].square().sum(), leaves)
    got = torch.autograd.grad(la.chunk_gated_delta_rule(*dev, cu_seqlens=cu.cuda())[0].square().sum(), dev)
    for a, b in zip(got, want):
        close(a.cpu(), b, 1e-3)


def test_unsupported_shape_falls_back_with_a_warning():
    q, k, v, g, beta = make_inputs(T=20, K=16, V=12)
    want, _ = la.chunk_gated_delta_rule(q, k, v, g, beta)
    la._backend._warned.clear()
    with pytest.warns(RuntimeWarning, match="host copies"):
        o, _ = la.chunk_gated_delta_rule(*_cuda((q, k, v, g, beta)))
    close(o.cpu(), want, 1e-5)


def test_compile_on_cuda():
    q, k, v, g, beta = _cuda(make_inputs(T=64, K=64, V=64))
    f = torch.compile(lambda *a: la.chunk_gated_delta_rule(*a)[0], backend="aot_eager", fullgraph=True)
    close(f(q, k, v, g, beta).cpu(), la.chunk_gated_delta_rule(q, k, v, g, beta)[0].cpu(), 1e-6)


def test_workspace_comes_from_torchs_caching_allocator():
    """The library's workspace (W, U and the chunk scores: (K + V + 64) 16-bit values per token and
    value head here, 10 MiB) is allocated by torch: it shows in torch's peak memory on top of the
    outputs, and the call gives the same result with the memory torch hands back."""
    q, k, v, g, beta = _cuda(make_inputs(B=1, T=4096, H=4, HV=4, K=128, V=128))
    qb, kb, vb = (x.bfloat16() for x in (q, k, v))
    first, _ = la.chunk_gated_delta_rule(qb, kb, vb, g, beta)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    o, _ = la.chunk_gated_delta_rule(qb, kb, vb, g, beta)
    torch.cuda.synchronize()
    workspace = 4096 * 4 * (128 + 128 + 64) * 2
    assert torch.cuda.max_memory_allocated() - base >= o.numel() * o.element_size() + workspace
    assert torch.equal(o, first)


# The per-key decays: KDA (chunkwise and recurrent) and VectorDecay under fla's chunk_gla (whose
# GLA has no grouped value heads), as (name, call(q, k, v, g, beta, **kw), rule, value heads).
_PER_KEY = [
    ("chunk_kda", la.chunk_kda, "kda", 4),
    ("fused_recurrent_kda", la.fused_recurrent_kda, "kda", 4),
    ("chunk_gla", lambda q, k, v, g, beta, **kw: la.chunk_gla(q, k, v, g, **kw), "vector_decay", 2),
]


def _device_call(call, *args, **kw):
    """call(*args, **kw) with every warning recorded; fails if it ran on host copies."""
    la._backend._warned.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = call(*args, **kw)
    assert not [w for w in seen if "host copies" in str(w.message)], [str(w.message) for w in seen]
    return result


@pytest.mark.parametrize("name,call,rule,HV", _PER_KEY, ids=[c[0] for c in _PER_KEY])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("strong", [False, True])
def test_per_key_forward_on_the_device(name, call, rule, HV, dtype, strong):
    """The per-key decays run linattn::cuda's kernels on CUDA tensors (no host copy), against the
    float64 reference on the same rounded inputs: T = 150 (not a multiple of the chunk), K = 128
    != V = 64, an initial state, mild or strong per-key gates (some keys never forget); 16-bit
    q, k, v with float32 gates (fla's mixed precision)."""
    q, k, v, g, beta = make_inputs(T=150, HV=HV, K=128, V=64, gate="key", strong=strong)
    g[..., ::5] = 0.0
    q, k, v = (x.to(dtype) for x in (q, k, v))
    h0 = make_state(2, HV, 128, 64)
    o, s = _device_call(call, *_cuda((q, k, v, g, beta)), initial_state=h0.cuda(), output_final_state=True)
    assert o.is_cuda and o.dtype == dtype and s.dtype == torch.float32
    want_o, want_s = reference(rule, q, k, v, g, beta if rule == "kda" else None, h0=h0)
    tol = 2e-4 if dtype == torch.float32 else 2e-2
    close(o.cpu(), want_o, tol)
    close(s.cpu(), want_s, tol)


@pytest.mark.parametrize("name,call,rule,HV", _PER_KEY, ids=[c[0] for c in _PER_KEY])
def test_per_key_packed_with_qk_norm(name, call, rule, HV):
    """Packed sequences (one of one token, one empty, one over two chunks) with per-sequence initial
    states, K = 64, V = 128, on the device kernels; KDA with q, k normalised inside the call
    (chunk_gla, as fla's, has no such option)."""
    cu = torch.tensor([0, 1, 1, 130, 200])
    q, k, v, g, beta = make_inputs(B=1, T=200, HV=HV, K=64, V=128, gate="key", normalize_keys=False)
    h0 = make_state(4, HV, 64, 128)
    norm = {"use_qk_l2norm_in_kernel": True} if rule == "kda" else {}
    o, s = _device_call(call, *_cuda((q, k, v, g, beta)), initial_state=h0.cuda(), output_final_state=True,
                        cu_seqlens=cu.cuda(), **norm)
    unit = (lambda x: x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)) if norm else (lambda x: x)
    want_o, want_s = reference(rule, unit(q), unit(k), v, g, beta if rule == "kda" else None, h0=h0, cu_seqlens=cu)
    close(o.cpu(), want_o, 2e-4)
    close(s.cpu(), want_s, 2e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_per_key_backward_on_the_device(dtype):
    """chunk_gla's forward and backward both run on the device (no host copies), packed with a
    one-token and an empty sequence and an initial state: gradients equal to the CPU's."""
    cu = torch.tensor([0, 1, 70, 70, 130])
    q, k, v, g, _ = make_inputs(B=1, T=130, HV=2, K=64, V=128, gate="key")
    h0 = make_state(4, 2, 64, 128)
    xs = [x.to(dtype) if x.is_floating_point() and i < 3 else x for i, x in enumerate((q, k, v, g, h0))]
    leaves = [x.float().clone().requires_grad_() for x in xs]
    dev = [x.cuda().requires_grad_() for x in xs]
    loss = lambda o, s: o.float().square().sum() + (s * s.detach().cos()).sum()
    want = torch.autograd.grad(loss(*la.chunk_gla(*leaves[:4], initial_state=leaves[4], output_final_state=True,
                                                  cu_seqlens=cu)), leaves)
    o, s = _device_call(la.chunk_gla, *dev[:4], initial_state=dev[4], output_final_state=True, cu_seqlens=cu.cuda())
    got = _device_call(torch.autograd.grad, loss(o, s), dev)
    for a, b in zip(got, want):
        assert a.is_cuda
        close(a.float().cpu(), b, 2e-4 if dtype == torch.float32 else 2e-2)
