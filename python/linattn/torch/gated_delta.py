# SPDX-License-Identifier: MIT
"""The delta-rule family under fla's names: chunk_/fused_recurrent_gated_delta_rule and
chunk_/fused_recurrent_delta_rule (docs/math.md#gated-delta, docs/math.md#delta).

Shapes: q, k [B, T, H, K]; v [B, T, HV, V] (HV a multiple of H: grouped value heads);
g, beta [B, T, HV]; initial_state and the final state [N, HV, K, V] (N = B, or the number of
packed sequences with cu_seqlens and B = 1). Returns (o [B, T, HV, V], final_state or None).
"""

import torch
import torch.nn.functional as F

from ._call import check_tensor, known as _known, run, state_v_first_of


def _gate(g, use_gate_in_kernel, A_log, dt_bias):
    """fla's in-kernel gate: -exp(A_log) * softplus(g + dt_bias) from the raw g [B, T, HV]."""
    if not use_gate_in_kernel:
        return g
    if A_log is None:
        raise ValueError("linattn: argument 'A_log' is missing (use_gate_in_kernel=True needs it)")
    check_tensor("A_log", A_log, 1)
    x = g.float() if g.dtype != torch.float64 else g
    if dt_bias is not None:
        x = x + dt_bias
    return -torch.exp(A_log.to(x.dtype)) * F.softplus(x)


def _beta(beta, use_beta_sigmoid_in_kernel, allow_neg_eigval):
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise ValueError("linattn: argument 'allow_neg_eigval' needs use_beta_sigmoid_in_kernel=True")
    if not use_beta_sigmoid_in_kernel:
        return beta
    b = torch.sigmoid(beta.float() if beta.dtype != torch.float64 else beta)
    return 2 * b if allow_neg_eigval else b


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False,
                           allow_neg_eigval=False, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
                           chunk_indices=None, cp_context=None, **kwargs):
    """S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, chunkwise (WY form).

    g is the log decay (<= 0), or with use_gate_in_kernel=True the raw gate turned into
    -exp(A_log) * softplus(g + dt_bias). cu_seqlens_cpu and chunk_indices are accepted and unused."""
    if cp_context is not None:
        raise NotImplementedError("linattn: argument 'cp_context' (context parallelism) is not supported")
    _known(kwargs, ("use_gate_in_kernel", "A_log", "dt_bias"))
    check_tensor("g", g, 3)
    check_tensor("beta", beta, 3)
    g = _gate(g, kwargs.get("use_gate_in_kernel", False), kwargs.get("A_log"), kwargs.get("dt_bias"))
    beta = _beta(beta, use_beta_sigmoid_in_kernel, allow_neg_eigval)
    return run("gated_delta", "chunk", q, k, v, [g, beta], scale=scale, initial_state=initial_state,
               output_final_state=output_final_state, cu_seqlens=cu_seqlens,
               use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, head_first=kwargs.get("head_first", False),
               state_v_first=state_v_first_of(state_v_first, kwargs), chunk_size=kwargs.get("chunk_size", 64))


def fused_recurrent_gated_delta_rule(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False,
                                     use_gate_in_kernel=False, A_log=None, dt_bias=None,
                                     use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                                     state_v_first=False, cu_seqlens=None, **kwargs):
    """The gated delta rule token by token (recurrent form). beta defaults to ones; without g it
    is the delta rule. Per-key (gk) and per-value (gv) gates are not supported."""
    if gk is not None or gv is not None:
        raise NotImplementedError("linattn: arguments 'gk' and 'gv' (per-key/per-value gates of the delta "
                                  "rule) are not supported; pass the scalar gate 'g'")
    _known(kwargs)
    check_tensor("q", q, 4)
    check_tensor("v", v, 4)
    if beta is None:
        beta = q.new_ones(v.shape[:3])
    check_tensor("beta", beta, 3)
    beta = _beta(beta, use_beta_sigmoid_in_kernel, allow_neg_eigval)
    common = dict(scale=scale, initial_state=initial_state, output_final_state=output_final_state,
                  cu_seqlens=cu_seqlens, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                  head_first=kwargs.get("head_first", False), state_v_first=state_v_first_of(state_v_first, kwargs))
    if g is None:
        if use_gate_in_kernel:
            raise ValueError("linattn: argument 'g' is missing (use_gate_in_kernel=True needs the raw gate)")
        return run("delta", "recurrent", q, k, v, [beta], **common)
    check_tensor("g", g, 3)
    g = _gate(g, use_gate_in_kernel, A_log, dt_bias)
    return run("gated_delta", "recurrent", q, k, v, [g, beta], **common)


def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False,
                     use_qk_l2norm_in_kernel=False, cu_seqlens=None, cu_seqlens_cpu=None, **kwargs):
    """S_t = S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T (DeltaNet), chunkwise. Unlike fla,
    float32 inputs are accepted too."""
    _known(kwargs)
    return run("delta", "chunk", q, k, v, [beta], scale=scale, initial_state=initial_state,
               output_final_state=output_final_state, cu_seqlens=cu_seqlens,
               use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, head_first=kwargs.get("head_first", False),
               chunk_size=kwargs.get("chunk_size", 64))


def fused_recurrent_delta_rule(q, k, v, beta=None, scale=None, initial_state=None, output_final_state=False,
                               use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
    """The delta rule token by token; beta defaults to ones."""
    _known(kwargs)
    if scale is not None and not scale > 0:
        raise ValueError(f"linattn: argument 'scale' is {scale}, expected a number > 0")
    check_tensor("q", q, 4)
    check_tensor("v", v, 4)
    if beta is None:
        beta = q.new_ones(v.shape[:3])
    return run("delta", "recurrent", q, k, v, [beta], scale=scale, initial_state=initial_state,
               output_final_state=output_final_state, cu_seqlens=cu_seqlens,
               use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, head_first=kwargs.get("head_first", False))
