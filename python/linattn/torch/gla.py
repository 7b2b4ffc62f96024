# SPDX-License-Identifier: MIT
"""The additive family under fla's names: chunk_simple_gla (scalar log decay per head and token,
docs/math.md#scalar-decay), chunk_gla (log decay per key, docs/math.md#vector-decay) and
chunk_linear_attn (no decay, optionally normalised).

Shapes: q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV] (simple_gla) or [B, T, H, K] (gla);
states [N, HV, K, V]. Returns (o, final_state or None).
"""

import torch

from ._call import check_seqlens, check_tensor, known, run, state_v_first_of


def chunk_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None, output_final_state=False,
                     state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, **kwargs):
    """S_t = exp(g_t) S_{t-1} + v_t k_t^T. g [B, T, HV] is a log decay per token; g_gamma [HV] a
    constant one per head (both given: they add). Neither: plain linear attention."""
    known(kwargs)
    common = dict(scale=scale, initial_state=initial_state, output_final_state=output_final_state,
                  cu_seqlens=cu_seqlens, head_first=kwargs.get("head_first", False),
                  state_v_first=state_v_first_of(state_v_first, kwargs),
                  chunk_size=kwargs.get("chunk_size") or 64)
    if g is None and g_gamma is None:
        return run("hebbian", "chunk", q, k, v, [], **common)
    check_tensor("v", v, 4)
    check_tensor("g", g, 3, optional=True)
    check_tensor("g_gamma", g_gamma, 1, optional=True)
    if g_gamma is not None:
        heads = v.shape[1] if common["head_first"] else v.shape[2]
        if g_gamma.shape[0] != heads:
            raise ValueError(f"linattn: argument 'g_gamma' has {g_gamma.shape[0]} entries, expected one per value "
                             f"head ({heads})")
        shape = v.shape[:3]
        gamma = (g_gamma[:, None] if common["head_first"] else g_gamma).expand(shape)
        g = gamma if g is None else g + gamma
    return run("scalar_decay", "chunk", q, k, v, [g], **common)


def chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False, state_v_first=False,
              cu_seqlens=None, cu_seqlens_cpu=None, **kwargs):
    """S_t = S_{t-1} diag(exp(g_t)) + v_t k_t^T with a log decay per key, g [B, T, H, K]."""
    known(kwargs)
    return run("vector_decay", "chunk", q, k, v, [g], scale=scale, initial_state=initial_state,
               output_final_state=output_final_state, cu_seqlens=cu_seqlens,
               head_first=kwargs.get("head_first", False),
               state_v_first=state_v_first_of(state_v_first, kwargs),
               chunk_size=kwargs.get("chunk_size", 64))


def _key_sums(k, z_init, cu_seqlens):
    """z_t = z_init + sum of k_s over s <= t within each sequence: [B, T, H, K]."""
    z = k.cumsum(1)
    if cu_seqlens is not None:
        # restart the running sum at every sequence start: subtract the sum before it
        starts = cu_seqlens[:-1].long()
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
        before = torch.cat([z.new_zeros(1, 1, *z.shape[2:]), z[:, :-1]], 1)[:, starts.clamp(max=max(z.shape[1] - 1, 0))]
        z = z - torch.repeat_interleave(before, lengths, dim=1, output_size=z.shape[1])
        if z_init is not None:
            z = z + torch.repeat_interleave(z_init.transpose(0, 1), lengths, dim=1, output_size=z.shape[1])
    elif z_init is not None:
        z = z + z_init
    return z


def _last(z, z_init, cu_seqlens):
    """The running key sum after every sequence: [N, 1, H, K]."""
    if cu_seqlens is None:
        return z[:, -1:]
    ends = (cu_seqlens[1:].long() - 1).clamp(min=0)
    last = z[0, ends].unsqueeze(1)
    empty = (cu_seqlens[1:] == cu_seqlens[:-1])[:, None, None, None]
    fallback = z_init if z_init is not None else torch.zeros_like(last)
    return torch.where(empty, fallback, last)


def chunk_linear_attn(q, k, v, scale=None, initial_state=None, output_final_state=False, normalize=True,
                      cu_seqlens=None, **kwargs):
    """Linear attention S_t = S_{t-1} + v_t k_t^T. With normalize=True (fla's default) o_t is
    divided by scale * q_t . z_t + 1e-10, z_t the running key sum; then initial_state may be a
    pair (state, z [N, 1, H, K]) and the second return value is (final_state, z)."""
    known(kwargs)
    if kwargs.get("head_first", False):
        raise NotImplementedError("linattn: head_first=True is not supported by chunk_linear_attn")
    z_init = None
    if normalize and isinstance(initial_state, tuple):
        initial_state, z_init = initial_state
        check_tensor("z", z_init, 4)
        check_seqlens(cu_seqlens, q, initial_state)
        n = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
        if tuple(z_init.shape) != (n, 1, q.shape[2], q.shape[3]):
            raise ValueError(f"linattn: argument 'initial_state' holds a key sum z of shape {tuple(z_init.shape)}, "
                             f"expected [N, 1, H, K] = {[n, 1, q.shape[2], q.shape[3]]}")
    o, final_state = run("hebbian", "chunk", q, k, v, [], scale=scale, initial_state=initial_state,
                         output_final_state=output_final_state, cu_seqlens=cu_seqlens)
    if not normalize:
        return o, final_state
    if scale is None:
        scale = q.shape[-1] ** -0.5
    real = torch.float64 if q.dtype == torch.float64 else torch.float32
    z = _key_sums(k.to(real), None if z_init is None else z_init.to(real), cu_seqlens)
    denom = (q.to(real) * scale * z).sum(-1, keepdim=True) + 1e-10      # [B, T, H, 1]
    denom = denom.repeat_interleave(v.shape[2] // q.shape[2], dim=2)   # per value head
    o = (o.to(real) / denom).to(q.dtype)
    return o, (final_state, _last(z, None if z_init is None else z_init.to(real), cu_seqlens))
