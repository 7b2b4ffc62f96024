# SPDX-License-Identifier: MIT
"""What every public function does around the custom op, as fla users expect it:

- layout: `head_first=True` takes `[B, H, T, ...]` tensors; `state_v_first=True` takes and
  returns states as `[N, HV, V, K]`;
- precision: bf16/fp16 q, k, v go to the kernels as they are (on the CPU always, on CUDA where
  the device kernels take the call), with the gates and betas in float32 (fla's mixed
  precision) or in q's dtype (anything else is converted to float32); every other call runs in float64 when any input is float64, else in float32
  (converted here). `o` comes back in q's dtype, the final state in float32 for 16-bit calls
  (as fla returns it) and in the compute dtype otherwise;
- `use_qk_l2norm_in_kernel`: q and k divided by sqrt(sum x^2 + 1e-6) inside the library's call
  (linattn::options::normalize_qk; its backward returns the gradients of the caller's q and k);
- argument checks that must come before any torch op (ValueError naming the argument); the
  library checks the rest (shapes, heads, offsets) and its messages name the argument too.
"""

import warnings

import torch

from . import _backend
from ._ops import forward_op
from ._rules import RULES

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_tensor(name, x, ndim=None, optional=False):
    if x is None:
        if optional:
            return
        raise ValueError(f"linattn: argument '{name}' is missing")
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"linattn: argument '{name}' is a {type(x).__name__}, expected a torch.Tensor")
    if x.dtype not in _FLOATS:
        raise ValueError(f"linattn: argument '{name}' has dtype {x.dtype}, expected a floating dtype")
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"linattn: argument '{name}' has {x.ndim} dimensions (shape {tuple(x.shape)}), "
                         f"expected {ndim}")


def check_seqlens(cu_seqlens, q, initial_state):
    if cu_seqlens is None:
        return
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dtype not in (torch.int32, torch.int64) \
            or cu_seqlens.ndim != 1:
        raise ValueError("linattn: argument 'cu_seqlens' must be a 1-D int32 or int64 tensor [N + 1]")
    if q.shape[0] != 1:
        raise ValueError(f"linattn: argument 'q' has batch size {q.shape[0]}; with 'cu_seqlens' the batch "
                         "size must be 1 (pack the sequences along T)")
    if initial_state is not None and initial_state.shape[0] != cu_seqlens.shape[0] - 1:
        raise ValueError(f"linattn: argument 'initial_state' holds {initial_state.shape[0]} states, "
                         f"'cu_seqlens' describes {cu_seqlens.shape[0] - 1} sequences")


def state_v_first_of(state_v_first, kwargs):
    """fla's state layout flag. Its former name `transpose_state_layout` still works, with fla's
    DeprecationWarning; both names at once raise ValueError, as in fla."""
    if "transpose_state_layout" not in kwargs:
        return bool(state_v_first)
    if state_v_first:
        raise ValueError("linattn: arguments 'state_v_first' and 'transpose_state_layout' (its deprecated name) "
                         "were both given; pass 'state_v_first' only")
    warnings.warn("linattn: argument 'transpose_state_layout' is deprecated and renamed to 'state_v_first' (as in fla)",
                  DeprecationWarning, stacklevel=3)
    return bool(kwargs["transpose_state_layout"])


def known(kwargs, names=()):
    """Rejects keyword arguments fla does not take either (chunk_size, head_first and the old
    transpose_state_layout are taken everywhere)."""
    for name in kwargs:
        if name not in names and name not in ("chunk_size", "head_first", "transpose_state_layout"):
            raise TypeError(f"linattn: unexpected keyword argument '{name}'")


def _intermediate_states(rule, form, q, k, v, extras, initial_state, cu_seqlens, scale, normalize_qk, number,
                         chunk_size):
    """fla's return_intermediate_states (inference only): o, the final state and h, the state at
    the start of every chunk, [B, NT, HV, K, V] (packed: [1, sum of the sequences' NT, HV, K, V]),
    from one forward call with options::checkpoints (the state after every chunk)."""
    B, T, HV, V = v.shape
    K = q.shape[-1]
    lengths = [T] * B if cu_seqlens is None else (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    chunks = [-(-n // chunk_size) for n in lengths]
    dtype = torch.float32 if q.dtype in (torch.bfloat16, torch.float16) else q.dtype
    out = q.new_empty((B, T, HV, V))
    final_state = q.new_empty((len(lengths), HV, K, V), dtype=dtype)
    checkpoints = q.new_empty((len(lengths), max(chunks, default=0), HV, K, V), dtype=dtype)
    _backend.forward(rule, form, q, k, v, extras, initial_state, cu_seqlens, scale, normalize_qk, number,
                     chunk_size, True, out, final_state, checkpoints)
    start = final_state.new_zeros(final_state.shape) if initial_state is None else initial_state.to(dtype)
    h = [torch.cat([start[n:n + 1], checkpoints[n, :c - 1]]) if c else checkpoints[n, :0]
         for n, c in enumerate(chunks)]
    h = torch.stack(h) if cu_seqlens is None else torch.cat(h)[None]
    return out, final_state, h


def run(rule, form, q, k, v, extras, *, scale=None, initial_state=None, output_final_state=False,
        cu_seqlens=None, use_qk_l2norm_in_kernel=False, head_first=False, state_v_first=False, number=0.0,
        chunk_size=64, intermediate_states=False):
    """Checks, converts, calls linattn::forward; returns (o, final_state or None), and with
    `intermediate_states` (fla's return_intermediate_states, no autograd) also h, the chunk-start
    states.

    q, k [B, T, H, K]; v [B, T, HV, V]; extras per token [B, T, HV] or [B, T, HV, K]
    (head_first: T and the head dimension swapped); initial_state [N, HV, K, V]."""
    spec = RULES[rule]
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x, 4)
    for name, x in zip(spec.extras, extras):
        check_tensor(name, x, 4 if name in spec.per_key else 3)
    check_tensor("initial_state", initial_state, 4, optional=True)
    if head_first:
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        extras = [x.transpose(1, 2) for x in extras]
    check_seqlens(cu_seqlens, q, initial_state)
    if scale is None:
        scale = q.shape[-1] ** -0.5
    out_dtype = q.dtype
    inputs = (q, k, v, *extras) + (() if initial_state is None else (initial_state,))
    real = torch.float64 if any(x.dtype == torch.float64 for x in inputs) else torch.float32
    if real == torch.float32 and _backend.runs_16bit(rule, form, q, k, v, chunk_size):
        # 16-bit q, k, v as they are; gates in float32 or q's dtype (read in place), states float32
        extras = [x if x.dtype in (torch.float32, q.dtype) else x.float() for x in extras]
    else:
        q, k, v = (x.to(real) for x in (q, k, v))
        extras = [x.to(real) for x in extras]
    if initial_state is not None:
        initial_state = initial_state.to(real)
        if state_v_first:
            initial_state = initial_state.transpose(-1, -2)
    if cu_seqlens is not None and cu_seqlens.device != q.device and q.device.type == "cpu":
        cu_seqlens = cu_seqlens.cpu()
    if intermediate_states:
        if torch.is_grad_enabled() and any(x.requires_grad for x in inputs):
            raise ValueError("linattn: argument 'return_intermediate_states' is for inference: call it under "
                             "torch.no_grad() or torch.inference_mode() (its results have no gradients)")
        with torch.no_grad():
            o, final_state, h = _intermediate_states(rule, form, q, k, v, extras, initial_state, cu_seqlens,
                                                     float(scale), bool(use_qk_l2norm_in_kernel), float(number),
                                                     int(chunk_size))
        h = h.to(out_dtype).transpose(-1, -2) if state_v_first else h.to(out_dtype)
        o = o.to(out_dtype)
        if head_first:
            o = o.transpose(1, 2)
        if state_v_first:
            final_state = final_state.transpose(-1, -2)
        return o, final_state if output_final_state else None, h
    o, final_state = forward_op(rule, form, q, k, v, extras, initial_state, cu_seqlens, float(scale),
                                bool(use_qk_l2norm_in_kernel), float(number), int(chunk_size),
                                bool(output_final_state))
    o = o.to(out_dtype)
    if head_first:
        o = o.transpose(1, 2)
    if not output_final_state:
        return o, None
    if state_v_first:
        final_state = final_state.transpose(-1, -2)
    return o, final_state
