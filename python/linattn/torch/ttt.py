# SPDX-License-Identifier: MIT
"""TTT-Linear (docs/math.md#ttt-linear), with the semantics of the official TTT code, under
names of ours in fla's style:

- `chunk_ttt_linear`: the dual form, tiles of `chunk_size` tokens (a multiple of `mini_batch`);
- `fused_recurrent_ttt_linear`: the primal form, token by token.

The memory is the inner model f(x) = x + LN(W^T x + b), trained by mini-batch gradient descent
on 1/2 |f(k_t) - v_t|^2 as the sequence is read. Its state is three tensors: the weights W
[N, HV, D, D] (row = input dimension), the bias b [N, HV, D], and the unfinished mini-batch's
cache [N, HV, D + 2, D]. `initial_state` takes W alone or a tuple (W, b) or (W, b, cache), and
the final state comes back as (W, b, cache): feeding it back continues the sequence exactly,
at any split point. Forward only: the library has no TTT backward, so a gradient through these
calls raises NotImplementedError.
"""

from typing import Optional

import torch
from torch import Tensor

from . import _backend
from ._call import check_seqlens, check_tensor, known
from ._ops import state_dtype


@torch.library.custom_op("linattn::ttt_forward", mutates_args=())
def ttt_forward_op(form: str, q: Tensor, k: Tensor, v: Tensor, eta: Tensor, ln_weight: Tensor, ln_bias: Tensor,
                   tau: Optional[Tensor], mini_batch: int, initial_state: Optional[Tensor],
                   initial_bias: Optional[Tensor], initial_cache: Optional[Tensor], cu_seqlens: Optional[Tensor],
                   scale: float, chunk_size: int, output_final_state: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    # o [B, T, HV, D] in q's dtype; W [N, HV, D, D], b [N, HV, D], cache [N, HV, D + 2, D] (empty when not asked for)
    out, state = _outputs(q, v, cu_seqlens, output_final_state)
    _backend.forward_ttt(form, q, k, v, eta, ln_weight, ln_bias, tau, mini_batch, initial_state, initial_bias,
                         initial_cache, cu_seqlens, scale, chunk_size, out, *state)
    return (out, *state) if output_final_state else (out, *_empty_states(q))


def _empty_states(q):
    """Three distinct empty tensors: an op's outputs are tensors, never None, and never alias."""
    return tuple(q.new_empty((0,), dtype=state_dtype(q)) for _ in range(3))


def _outputs(q, v, cu_seqlens, output_final_state):
    out = q.new_empty(v.shape)
    if not output_final_state:
        return out, (None, None, None)
    N = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    HV, D = v.shape[2], v.shape[3]
    s = state_dtype(q)
    return out, (q.new_empty((N, HV, D, D), dtype=s), q.new_empty((N, HV, D), dtype=s),
                 q.new_empty((N, HV, D + 2, D), dtype=s))


@ttt_forward_op.register_fake
def _(form, q, k, v, eta, ln_weight, ln_bias, tau, mini_batch, initial_state, initial_bias, initial_cache,
      cu_seqlens, scale, chunk_size, output_final_state):
    out, state = _outputs(q, v, cu_seqlens, output_final_state)
    return (out, *(state if output_final_state else _empty_states(q)))


def _no_backward(ctx, *grads):
    raise NotImplementedError("linattn: TTT-Linear has no backward pass (forward only)")


ttt_forward_op.register_autograd(_no_backward, setup_context=lambda ctx, inputs, output: None)


def _state_parts(initial_state):
    """W, b, cache from a tensor W or a tuple (W,), (W, b), (W, b, cache)."""
    if initial_state is None or isinstance(initial_state, torch.Tensor):
        return initial_state, None, None
    if not isinstance(initial_state, (tuple, list)) or not 1 <= len(initial_state) <= 3:
        raise ValueError("linattn: argument 'initial_state' must be a tensor W [N, HV, D, D] or a tuple "
                         "(W, b) or (W, b, cache)")
    parts = list(initial_state) + [None] * (3 - len(initial_state))
    return parts[0], parts[1], parts[2]


def _ttt(form, q, k, v, eta, ln_weight, ln_bias, mini_batch, tau, scale, initial_state, output_final_state,
         cu_seqlens, kwargs):
    known(kwargs)
    head_first = kwargs.get("head_first", False)
    if not (isinstance(mini_batch, int) and mini_batch >= 1):
        raise ValueError(f"linattn: argument 'mini_batch' is {mini_batch!r}, expected an integer >= 1")
    chunk_size = kwargs.get("chunk_size") or mini_batch * max(1, 64 // mini_batch)
    w0, b0, c0 = _state_parts(initial_state)
    for name, x, ndim in (("q", q, 4), ("k", k, 4), ("v", v, 4), ("eta", eta, 3), ("ln_weight", ln_weight, 2),
                          ("ln_bias", ln_bias, 2)):
        check_tensor(name, x, ndim)
    for name, x, ndim in (("tau", tau, 1), ("initial_state", w0, 4), ("initial_bias", b0, 3),
                          ("initial_cache", c0, 4)):
        check_tensor(name, x, ndim, optional=True)
    if head_first:
        q, k, v, eta = (x.transpose(1, 2) for x in (q, k, v, eta))
    check_seqlens(cu_seqlens, q, w0)
    out_dtype = q.dtype
    given = [x for x in (q, k, v, eta, ln_weight, ln_bias, tau, w0, b0, c0) if x is not None]
    real = torch.float64 if any(x.dtype == torch.float64 for x in given) else torch.float32
    sixteen = real == torch.float32 and q.dtype in (torch.bfloat16, torch.float16) and k.dtype == v.dtype == q.dtype
    if not sixteen:
        q, k, v = (x.to(real) for x in (q, k, v))
    coefficient = lambda x: None if x is None else x if x.dtype in (torch.float32, q.dtype) else x.to(real)
    eta, ln_weight, ln_bias, tau = (coefficient(x) for x in (eta, ln_weight, ln_bias, tau))
    state = state_dtype(q)
    w0, b0, c0 = (None if x is None else x.to(state) for x in (w0, b0, c0))
    if cu_seqlens is not None and cu_seqlens.device != q.device and q.device.type == "cpu":
        cu_seqlens = cu_seqlens.cpu()
    o, w, b, c = ttt_forward_op(form, q, k, v, eta, ln_weight, ln_bias, tau, mini_batch, w0, b0, c0, cu_seqlens,
                                1.0 if scale is None else float(scale), int(chunk_size), bool(output_final_state))
    o = o.to(out_dtype)
    if head_first:
        o = o.transpose(1, 2)
    return o, ((w, b, c) if output_final_state else None)


def chunk_ttt_linear(q, k, v, eta, ln_weight, ln_bias, mini_batch=16, tau=None, scale=None, initial_state=None,
                     output_final_state=False, cu_seqlens=None, **kwargs):
    """TTT-Linear, dual form. q, k [B, T, H, D]; v [B, T, HV, D]; eta [B, T, HV] (the per-token step,
    the official code's eta_base / D * sigmoid(...)); ln_weight, ln_bias [HV, D] (the inner
    LayerNorm); tau [mini_batch] (position factors, default 1/i); scale multiplies q (default 1,
    as the official code). Returns (o [B, T, HV, D], (W, b, cache) or None)."""
    return _ttt("chunk", q, k, v, eta, ln_weight, ln_bias, mini_batch, tau, scale, initial_state,
                output_final_state, cu_seqlens, kwargs)


def fused_recurrent_ttt_linear(q, k, v, eta, ln_weight, ln_bias, mini_batch=16, tau=None, scale=None,
                               initial_state=None, output_final_state=False, cu_seqlens=None, **kwargs):
    """TTT-Linear, primal form (token by token); arguments and returns as chunk_ttt_linear."""
    return _ttt("recurrent", q, k, v, eta, ln_weight, ln_bias, mini_batch, tau, scale, initial_state,
                output_final_state, cu_seqlens, kwargs)
