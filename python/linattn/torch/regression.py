# SPDX-License-Identifier: MIT
"""Rules fla does not have, under names of ours in fla's style (same arguments, same returns):

- Longhorn (docs/math.md#longhorn): the delta rule with beta_t = delta_t / (1 + delta_t |k_t|^2),
  delta [B, T, HV] >= 0; stable without key normalisation. Forward and backward.
- NLMS (docs/math.md#nlms): the delta rule with beta_t = 1 / (|k_t|^2 + eps_k). Forward and
  backward.
- RLS (docs/math.md#rls): recursive least squares with optional log forgetting factor
  g [B, T, HV] and ridge delta; state [N, HV, K, V + K] (S^T then P). Forward only.
"""

from ._call import check_tensor, known, run


def _common(kwargs, **given):
    known(kwargs)
    return dict(given, head_first=kwargs.get("head_first", False), chunk_size=kwargs.get("chunk_size", 64))


def chunk_longhorn(q, k, v, delta, scale=None, initial_state=None, output_final_state=False,
                   use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
    """Longhorn, chunkwise."""
    return run("longhorn", "chunk", q, k, v, [delta], **_common(
        kwargs, scale=scale, initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel))


def fused_recurrent_longhorn(q, k, v, delta, scale=None, initial_state=None, output_final_state=False,
                             use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
    """Longhorn, token by token."""
    return run("longhorn", "recurrent", q, k, v, [delta], **_common(
        kwargs, scale=scale, initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel))


def _eps(eps_k):
    if not (isinstance(eps_k, (int, float)) and eps_k > 0):
        raise ValueError(f"linattn: argument 'eps_k' is {eps_k!r}, expected a number > 0")
    return float(eps_k)


def chunk_nlms(q, k, v, eps_k=1e-6, scale=None, initial_state=None, output_final_state=False,
               use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
    """NLMS, chunkwise."""
    return run("nlms", "chunk", q, k, v, [], number=_eps(eps_k), **_common(
        kwargs, scale=scale, initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel))


def fused_recurrent_nlms(q, k, v, eps_k=1e-6, scale=None, initial_state=None, output_final_state=False,
                         use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
    """NLMS, token by token."""
    return run("nlms", "recurrent", q, k, v, [], number=_eps(eps_k), **_common(
        kwargs, scale=scale, initial_state=initial_state, output_final_state=output_final_state,
        cu_seqlens=cu_seqlens, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel))


def _rls(form, q, k, v, g, delta, kwargs, **given):
    if not (isinstance(delta, (int, float)) and delta > 0):
        raise ValueError(f"linattn: argument 'delta' is {delta!r}, expected a number > 0")
    check_tensor("v", v, 4)
    check_tensor("g", g, 3, optional=True)
    if g is None:  # no forgetting: log factor 0 (a broadcast view, nothing allocated per token)
        g = v.new_zeros(()).expand(v.shape[:3])
    return run("rls", form, q, k, v, [g], number=float(delta), **_common(kwargs, **given))


def chunk_rls(q, k, v, g=None, delta=1.0, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
    """RLS, chunkwise (block Woodbury). Forward only: backward raises NotImplementedError."""
    return _rls("chunk", q, k, v, g, delta, kwargs, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)


def fused_recurrent_rls(q, k, v, g=None, delta=1.0, scale=None, initial_state=None, output_final_state=False,
                        use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
    """RLS, token by token (Sherman-Morrison). Forward only."""
    return _rls("recurrent", q, k, v, g, delta, kwargs, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
