# SPDX-License-Identifier: MIT
"""The torch.library custom ops `linattn::forward` and `linattn::backward`, one pair for every
rule (the rule is a string argument), with fake implementations for torch.compile and the
autograd formula registered on the forward op.

Both ops take q, k, v and the rule's extras as the public functions of this package leave them:
one floating dtype (float32 or float64), or 16-bit q, k, v (CPU, and CUDA where the device
kernels take the call) with extras in that dtype or float32; they allocate their outputs with torch (the caching allocator on CUDA): o and the
input gradients in their inputs' dtypes, states float32 for 16-bit q. `final_state` is an empty tensor when not asked for: an op's
outputs are tensors, never None.
"""

from typing import List, Optional

import torch
from torch import Tensor

from . import _backend
from ._rules import RULES


def state_dtype(q):
    """The kernels' state type: float32 for 16-bit q, else q's dtype."""
    return torch.float32 if q.dtype in (torch.bfloat16, torch.float16) else q.dtype


def _new_state(q, shape):
    """A state tensor of the kernels' state type."""
    return q.new_empty(shape, dtype=state_dtype(q))


def _state_shape(rule, q, v, initial_state, cu_seqlens):
    N = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    K, V = q.shape[-1], v.shape[-1]
    return (N, v.shape[2], K, V + K if RULES[rule].state_extra_columns else V)


@torch.library.custom_op("linattn::forward", mutates_args=())
def forward_op(rule: str, form: str, q: Tensor, k: Tensor, v: Tensor, extras: List[Tensor],
               initial_state: Optional[Tensor], cu_seqlens: Optional[Tensor], scale: float, normalize_qk: bool,
               number: float, chunk_size: int, output_final_state: bool) -> tuple[Tensor, Tensor]:
    # o [B, T, HV, V] in q's dtype; final state [N, HV, K, V] (empty when not asked for)
    out = q.new_empty((*v.shape[:3], v.shape[3]))
    state = (_new_state(q, _state_shape(rule, q, v, initial_state, cu_seqlens)) if output_final_state
             else _new_state(q, (0,)))
    _backend.forward(rule, form, q, k, v, extras, initial_state, cu_seqlens, scale, normalize_qk, number,
                     chunk_size, output_final_state, out, state if output_final_state else None)
    return out, state


@forward_op.register_fake
def _(rule, form, q, k, v, extras, initial_state, cu_seqlens, scale, normalize_qk, number, chunk_size,
      output_final_state):
    out = q.new_empty((*v.shape[:3], v.shape[3]))
    state = (_new_state(q, _state_shape(rule, q, v, initial_state, cu_seqlens)) if output_final_state
             else _new_state(q, (0,)))
    return out, state


@torch.library.custom_op("linattn::backward", mutates_args=())
def backward_op(rule: str, q: Tensor, k: Tensor, v: Tensor, extras: List[Tensor], grad_out: Tensor,
                grad_final_state: Optional[Tensor], initial_state: Optional[Tensor], cu_seqlens: Optional[Tensor],
                scale: float, normalize_qk: bool, number: float, chunk_size: int,
                want_initial_grad: bool) -> List[Tensor]:
    # [dq, dk, dv, d(extras)..., d(initial_state) (empty when not asked for)]
    grads = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v, *extras)]
    d_init = _new_state(q, _state_shape(rule, q, v, initial_state, cu_seqlens)) if want_initial_grad else None
    _backend.backward(rule, q, k, v, extras, grad_out.contiguous(),
                      None if grad_final_state is None else grad_final_state.contiguous(), initial_state,
                      cu_seqlens, scale, normalize_qk, number, chunk_size, grads, d_init)
    return [*grads, d_init if want_initial_grad else _new_state(q, (0,))]


@backward_op.register_fake
def _(rule, q, k, v, extras, grad_out, grad_final_state, initial_state, cu_seqlens, scale, normalize_qk, number,
      chunk_size, want_initial_grad):
    grads = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v, *extras)]
    d_init = _new_state(q, _state_shape(rule, q, v, initial_state, cu_seqlens) if want_initial_grad else (0,))
    return [*grads, d_init]


def _setup_context(ctx, inputs, output):
    (rule, form, q, k, v, extras, initial_state, cu_seqlens, scale, normalize_qk, number, chunk_size,
     output_final_state) = inputs
    ctx.save_for_backward(q, k, v, initial_state, cu_seqlens, *extras)
    ctx.call = (rule, scale, normalize_qk, number, chunk_size, output_final_state)


def _backward(ctx, grad_out, grad_state):
    rule, scale, normalize_qk, number, chunk_size, output_final_state = ctx.call
    q, k, v, initial_state, cu_seqlens, *extras = ctx.saved_tensors
    want_initial_grad = initial_state is not None and ctx.needs_input_grad[6]
    if grad_out is None:
        grad_out = torch.zeros_like(q.new_empty((*v.shape[:3], v.shape[3])))
    grads = torch.ops.linattn.backward(rule, q, k, v, extras, grad_out,
                                       grad_state if output_final_state else None, initial_state, cu_seqlens,
                                       scale, normalize_qk, number, chunk_size, want_initial_grad)
    dq, dk, dv, *rest = grads
    d_extras, d_init = rest[:-1], rest[-1]
    return (None, None, dq, dk, dv, d_extras, d_init if want_initial_grad else None,
            None, None, None, None, None, None)


forward_op.register_autograd(_backward, setup_context=_setup_context)
