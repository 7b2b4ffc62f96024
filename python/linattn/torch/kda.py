# SPDX-License-Identifier: MIT
"""Kimi Delta Attention under fla's names: chunk_kda and fused_recurrent_kda
(docs/math.md#kda): S_t = S_{t-1} diag(exp(g_t)) (I - beta_t k_t k_t^T) + beta_t v_t k_t^T.

Shapes: q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV, K] (log decay per key, <= 0); beta
[B, T, HV]; states [N, HV, K, V]. Differentiable (the library's chunkwise backward, through
autograd: dq, dk, dv, dg, dbeta and the initial state's gradient; with use_gate_in_kernel
the gradient reaches A_log and dt_bias through torch). CUDA tensors with K, V in {64, 128} run
linattn::cuda's per-key forward kernels, other sizes and the backward the CPU kernels on host
copies.
"""

import torch
import torch.nn.functional as F

from ._call import check_tensor, known as _known, run, state_v_first_of
from .gated_delta import _beta


def _per_head(name, x, heads, dtype):
    """A per-value-head parameter as fla takes it (HV elements in any shape, e.g. [HV] or
    [1, 1, HV, 1]), as an [HV, 1] column."""
    check_tensor(name, x)
    if x.numel() != heads:
        raise ValueError(f"linattn: argument '{name}' has {x.numel()} elements (shape {tuple(x.shape)}), "
                         f"expected {heads} (one per value head)")
    return x.to(dtype).reshape(heads, 1)


def _kda_gate(g, use_gate_in_kernel, A_log, dt_bias, lower_bound):
    """fla's in-kernel KDA gate from the raw g [B, T, HV, K], with x = g + dt_bias: -exp(A_log) *
    softplus(x); with lower_bound (fla's safe gate) lower_bound * sigmoid(exp(A_log) * x), or
    lower_bound * sigmoid(x) without A_log."""
    if not use_gate_in_kernel:
        return g
    x = g.float() if g.dtype != torch.float64 else g
    HV, K = x.shape[-2], x.shape[-1]
    if dt_bias is not None:
        check_tensor("dt_bias", dt_bias)
        if dt_bias.numel() != HV * K:
            raise ValueError(f"linattn: argument 'dt_bias' has {dt_bias.numel()} elements (shape "
                             f"{tuple(dt_bias.shape)}), expected HV * K = {HV * K}")
        x = x + dt_bias.to(x.dtype).reshape(HV, K)
    if lower_bound is not None:
        if A_log is not None:
            x = torch.exp(_per_head("A_log", A_log, HV, x.dtype)) * x
        return lower_bound * torch.sigmoid(x)
    if A_log is None:
        raise ValueError("linattn: argument 'A_log' is missing (use_gate_in_kernel=True needs it)")
    return -torch.exp(_per_head("A_log", A_log, HV, x.dtype)) * F.softplus(x)


def _kda(form, q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
         use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, cu_seqlens, kwargs):
    if kwargs.get("cp_context") is not None:
        raise NotImplementedError("linattn: argument 'cp_context' (context parallelism) is not supported")
    _known(kwargs, ("cp_context", "A_log", "dt_bias", "lower_bound", "safe_gate", "disable_recompute", "cu_seqlens_cpu",
                    "chunk_indices", "return_intermediate_states"))
    check_tensor("g", g, 4)
    check_tensor("beta", beta, 3)
    g = _kda_gate(g, use_gate_in_kernel, kwargs.get("A_log"), kwargs.get("dt_bias"), kwargs.get("lower_bound"))
    beta = _beta(beta, use_beta_sigmoid_in_kernel, allow_neg_eigval)
    return run("kda", form, q, k, v, [g, beta], scale=scale, initial_state=initial_state,
               output_final_state=output_final_state, cu_seqlens=cu_seqlens,
               use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, head_first=kwargs.get("head_first", False),
               state_v_first=state_v_first_of(state_v_first, kwargs), chunk_size=kwargs.get("chunk_size", 64),
               intermediate_states=form == "chunk" and bool(kwargs.get("return_intermediate_states")))


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
              allow_neg_eigval=False, state_v_first=False, cu_seqlens=None, **kwargs):
    """KDA, chunkwise (the WY form with per-key decays). Returns (o, final_state or None), and
    with return_intermediate_states=True (inference only) also h [B, NT, HV, K, V], the state at
    the start of every chunk (packed: [1, total chunks, HV, K, V]) in q's dtype, as fla does.
    chunk_size is 32 or 64, as in fla."""
    chunk_size = kwargs.get("chunk_size", 64)
    if chunk_size not in (32, 64):
        raise ValueError(f"linattn: argument 'chunk_size' is {chunk_size!r}: `chunk_size` must be either 32 or 64")
    return _kda("chunk", q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, cu_seqlens, kwargs)


def fused_recurrent_kda(q, k, v, g, beta=None, scale=None, initial_state=None, output_final_state=False,
                        use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
                        allow_neg_eigval=False, state_v_first=False, cu_seqlens=None, **kwargs):
    """KDA token by token (recurrent form); beta defaults to ones. return_intermediate_states is
    taken and ignored, as fla's fused_recurrent_kda does."""
    if beta is None:
        check_tensor("v", v, 4)
        beta = v.new_ones(v.shape[:3])
    return _kda("recurrent", q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, cu_seqlens, kwargs)
