# SPDX-License-Identifier: MIT
"""Runs one rule's forward or backward on the tensors' device.

CPU tensors go to linattn._cpu (float32, float64, or bf16/fp16 q, k, v with their gates in that
dtype or float32, read as they are). CUDA tensors go to linattn._cuda (forward, and backward
but for the per-key decays) when it was built and supports the call (rule, K and V in {64, 128};
float32, or bf16/fp16 q, k, v with their gates in that dtype or float32); every other CUDA call
runs the CPU kernels on host copies and copies the results back, with a warning the first time
each case happens (docs/python.md#cuda-tensors).
"""

import warnings

import torch

from .. import _cpu
from ._rules import RULES

try:  # built only where a CUDA compiler was found (python/cuda/module.cmake)
    from .. import _cuda
except ImportError:  # pragma: no cover - depends on the build
    _cuda = None

_warned = set()
_check_values = False


def check_inputs(enabled=True):
    """Also scan every input for NaN/Inf, log gates > 0 and negative beta/delta before computing
    (the library's options::check_finite: one extra pass over the inputs; off by default, as
    in fla). Returns the previous setting."""
    global _check_values
    previous, _check_values = _check_values, bool(enabled)
    return previous


class _python_names:
    """The library names options by their C++ path ('options.initial_state'); Python users know
    them as arguments ('initial_state')."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, trace):
        if kind is ValueError and "'options." in str(error):
            raise ValueError(str(error).replace("'options.", "'")) from None
        return False


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def cuda_available():
    """Whether the CUDA module was built (it runs the CUDA forward and backward kernels)."""
    return _cuda is not None


def _threads():
    return max(1, torch.get_num_threads())


def _host(t):
    return None if t is None else t.detach().cpu()


def _on_host(run, outputs):
    """Calls run(host_outputs) with CPU buffers shaped like `outputs` (None stays None), then
    copies the results into `outputs`: the fallback for tensors no device kernel takes."""
    host = [None if x is None else torch.empty(x.shape, dtype=x.dtype) for x in outputs]
    run(host)
    for x, h in zip(outputs, host):
        if x is not None:
            x.copy_(h)


_CUDA_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _cuda_supports(rule, form, q, v, chunk_size):
    K, V = q.shape[-1], v.shape[-1]
    spec = RULES[rule]
    return (_cuda is not None and spec.cuda and q.dtype in _CUDA_DTYPES
            and K in (64, 128) and V in (64, 128) and (form == "recurrent" or chunk_size == 64))


def runs_16bit(rule, form, q, k, v, chunk_size):
    """Whether a call with these tensors runs on 16-bit q, k, v as they are (bf16 or fp16 of one
    dtype): always on CPU tensors, and on CUDA tensors for the rules and sizes linattn._cuda
    takes; otherwise the caller converts to float32."""
    if q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != q.dtype or v.dtype != q.dtype:
        return False
    return q.device.type == "cpu" or (q.device.type == "cuda" and _cuda_supports(rule, form, q, v, chunk_size))


def _tf32():
    """Whether a float32 chunk forward on CUDA takes one TF32 product per step
    (linattn::options::precision = tf32): where torch allows TF32 for CUDA matmuls; otherwise
    fp32-accurate products. Read only for those calls (forward() asks for no other), so decode
    and 16-bit calls do not pay for torch's flag lookups. torch >= 2.9 says so in
    torch.backends.cuda.matmul.fp32_precision ("tf32", "ieee", or "none" when unset), which also
    reflects set_float32_matmul_precision and the legacy allow_tf32; there, reading allow_tf32
    after the new API was used raises, so it is read only when the new setting says nothing."""
    matmul = torch.backends.cuda.matmul
    precision = getattr(matmul, "fp32_precision", None)
    if precision in ("tf32", "ieee"):
        return precision == "tf32"
    try:
        return bool(matmul.allow_tf32)
    except RuntimeError:
        return False


def forward(rule, form, q, k, v, extras, initial_state, cu_seqlens, scale, normalize_qk, number, chunk_size,
            output_final_state, out, final_state, checkpoints=None):
    """Writes `out` [B, T, HV, V] and, if given, `final_state` [N, HV, K, V(+K)] and `checkpoints`
    [N, J, HV, K, V] (the state after every chunk_size tokens, linattn::options::checkpoints);
    `normalize_qk`: q and k L2-normalised inside the call (linattn::options::normalize_qk)."""
    if q.device.type == "cpu":
        with _python_names():
            getattr(_cpu, "forward_" + rule)(form, q, k, v, list(extras), out, initial_state, final_state,
                                             cu_seqlens, scale, normalize_qk, number, chunk_size, _threads(),
                                             _check_values, checkpoints)
        return
    if q.device.type == "cuda" and _cuda_supports(rule, form, q, v, chunk_size):
        stream = torch.cuda.current_stream(q.device).cuda_stream
        dense = lambda t: None if t is None else t.contiguous()   # the device kernels' row layout
        with torch.cuda.device(q.device), _python_names():
            getattr(_cuda, "forward_" + rule)(form, dense(q), dense(k), dense(v), [dense(e) for e in extras], out,
                                              dense(initial_state), final_state, cu_seqlens, scale, normalize_qk,
                                              number, form == "chunk" and q.dtype == torch.float32 and _tf32(),
                                              stream, checkpoints)
        return
    _warn_once(("forward", rule, q.device.type),
               f"linattn: {rule} {form} forward on {q.device.type} tensors of K={q.shape[-1]}, V={v.shape[-1]} "
               "runs the CPU kernels on host copies (no device kernel for this case); docs/python.md")
    _on_host(lambda h: forward(rule, form, _host(q), _host(k), _host(v), [_host(e) for e in extras],
                               _host(initial_state), _host(cu_seqlens), scale, normalize_qk, number, chunk_size,
                               output_final_state, h[0], h[1], h[2]), [out, final_state, checkpoints])


def backward(rule, q, k, v, extras, grad_out, grad_final_state, initial_state, cu_seqlens, scale, normalize_qk,
             number, chunk_size, grads, grad_initial_state):
    """Writes grads = [dq, dk, dv, d(extras)...] and, if given, grad_initial_state."""
    if not RULES[rule].backward:
        raise NotImplementedError(f"linattn: the {rule} rule has no backward pass (forward only)")
    if q.device.type == "cpu":
        with _python_names():
            getattr(_cpu, "backward_" + rule)(q, k, v, list(extras), grad_out, grad_final_state, initial_state,
                                              grad_initial_state, grads[0], grads[1], grads[2], list(grads[3:]),
                                              cu_seqlens, scale, normalize_qk, number, chunk_size, _threads())
        return
    if q.device.type == "cuda" and _cuda_supports(rule, "chunk", q, v, 64):
        stream = torch.cuda.current_stream(q.device).cuda_stream
        dense = lambda t: None if t is None else t.contiguous()
        with torch.cuda.device(q.device), _python_names():
            getattr(_cuda, "backward_" + rule)(dense(q), dense(k), dense(v), [dense(e) for e in extras],
                                               dense(grad_out), dense(grad_final_state), dense(initial_state),
                                               grad_initial_state, grads[0], grads[1], grads[2], list(grads[3:]),
                                               cu_seqlens, scale, normalize_qk, number, stream)
        return
    _warn_once(("backward", rule, q.device.type),
               f"linattn: the {rule} backward of {q.device.type} tensors of K={q.shape[-1]}, V={v.shape[-1]} "
               "runs the CPU kernels on host copies (no device kernel for this case); docs/python.md")
    _on_host(lambda h: backward(rule, _host(q), _host(k), _host(v), [_host(e) for e in extras], _host(grad_out),
                                _host(grad_final_state), _host(initial_state), _host(cu_seqlens), scale,
                                normalize_qk, number, chunk_size, h[:-1], h[-1]), [*grads, grad_initial_state])


def forward_ttt(form, q, k, v, eta, ln_weight, ln_bias, tau, mini_batch, initial_state, initial_bias,
                initial_cache, cu_seqlens, scale, chunk_size, out, final_state, final_bias, final_cache):
    """TTT-Linear's forward (linattn._cpu.forward_ttt_linear): writes `out` and, if given, the
    final weights, bias and cache. It has CPU kernels only: other devices run them on host copies."""
    if q.device.type == "cpu":
        with _python_names():
            _cpu.forward_ttt_linear(form, q, k, v, eta, ln_weight, ln_bias, tau, mini_batch, out, initial_state,
                                    final_state, initial_bias, final_bias, initial_cache, final_cache, cu_seqlens,
                                    scale, chunk_size, _threads(), _check_values)
        return
    _warn_once(("forward", "ttt_linear", q.device.type),
               f"linattn: ttt_linear {form} forward on {q.device.type} tensors runs the CPU kernels on host copies "
               "(no device kernel for this rule); docs/python.md")
    _on_host(lambda h: forward_ttt(form, *(_host(x) for x in (q, k, v, eta, ln_weight, ln_bias, tau)), mini_batch,
                                   *(_host(x) for x in (initial_state, initial_bias, initial_cache, cu_seqlens)),
                                   scale, chunk_size, *h), [out, final_state, final_bias, final_cache])
