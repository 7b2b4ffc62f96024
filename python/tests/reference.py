# SPDX-License-Identifier: MIT
"""Plain-torch float64 references: every rule token by token, straight from docs/math.md, with
the state h = S^T of shape [K, V] per (sequence, value head) and o_t = h_t^T (scale q_t).
Differentiable by autograd, so the gradient tests compare against them too."""

import torch


def _step(rule, h, k, v, g, beta, eps_k):
    """One token for all (batch, value head) pairs: h [B, HV, K, V]; k [B, HV, K]; v [B, HV, V];
    g [B, HV] or [B, HV, K] (vector_decay, kda); beta [B, HV] (Longhorn: delta)."""
    if rule in ("scalar_decay", "gated_delta"):
        h = h * torch.exp(g)[..., None, None]
    elif rule in ("vector_decay", "kda"):
        h = h * torch.exp(g)[..., None]
    if rule in ("hebbian", "scalar_decay", "vector_decay"):
        return h + k[..., :, None] * v[..., None, :]
    sq = (k * k).sum(-1)
    if rule == "longhorn":
        beta = beta / (1 + beta * sq)
    elif rule == "nlms":
        beta = 1 / (sq + eps_k)
    err = v - torch.einsum("bhkv,bhk->bhv", h, k)          # v_t - S k_t
    return h + beta[..., None, None] * k[..., :, None] * err[..., None, :]


def _rls_step(h, P, k, v, g):
    """Sherman-Morrison (docs/math.md#rls): h [B, HV, K, V], P [B, HV, K, K]."""
    gamma = torch.exp(g)
    p = torch.einsum("bhij,bhj->bhi", P, k)
    kappa = p / (gamma + (k * p).sum(-1))[..., None]
    err = v - torch.einsum("bhkv,bhk->bhv", h, k)
    h = h + kappa[..., :, None] * err[..., None, :]
    P = (P - kappa[..., :, None] * p[..., None, :]) / gamma[..., None, None]
    return h, P


def _one_batch(rule, q, k, v, g, beta, scale, h0, eps_k, delta):
    """q, k [B, T, H, K]; v [B, T, HV, V]; returns o [B, T, HV, V], final state."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    q, k = (x.repeat_interleave(HV // H, dim=2) for x in (q, k))
    if rule == "rls":
        h = torch.zeros(B, HV, K, V, dtype=q.dtype) if h0 is None else h0[..., :V]
        P = (torch.eye(K, dtype=q.dtype) / delta).expand(B, HV, K, K) if h0 is None else h0[..., V:]
    else:
        h = torch.zeros(B, HV, K, V, dtype=q.dtype) if h0 is None else h0
    out = []
    for t in range(T):
        gt = None if g is None else g[:, t]
        if rule == "rls":
            h, P = _rls_step(h, P, k[:, t], v[:, t], gt if gt is not None else torch.zeros(B, HV, dtype=q.dtype))
        else:
            h = _step(rule, h, k[:, t], v[:, t], gt, None if beta is None else beta[:, t], eps_k)
        out.append(torch.einsum("bhkv,bhk->bhv", h, scale * q[:, t]))
    o = torch.stack(out, 1) if out else v.new_zeros(B, 0, HV, V)
    return o, (torch.cat([h, P], -1) if rule == "rls" else h)


def reference(rule, q, k, v, g=None, beta=None, scale=None, h0=None, cu_seqlens=None, eps_k=1e-6, delta=1.0):
    """The rule on float64 copies; packed sequences one by one. Returns (o, final_state)."""
    f = lambda x: None if x is None else x.double()
    q, k, v, g, beta, h0 = map(f, (q, k, v, g, beta, h0))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if cu_seqlens is None:
        return _one_batch(rule, q, k, v, g, beta, scale, h0, eps_k, delta)
    outs, states = [], []
    for n in range(len(cu_seqlens) - 1):
        a, b = int(cu_seqlens[n]), int(cu_seqlens[n + 1])
        cut = lambda x: None if x is None else x[:, a:b]
        o, s = _one_batch(rule, cut(q), cut(k), cut(v), cut(g), cut(beta), scale,
                          None if h0 is None else h0[n:n + 1], eps_k, delta)
        outs.append(o)
        states.append(s)
    return torch.cat(outs, 1), torch.cat(states, 0)
