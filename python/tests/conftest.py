# SPDX-License-Identifier: MIT
"""Shared inputs: random, non-trivial (no zeros), in the ranges each rule expects."""

import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def make_inputs(B=2, T=37, H=2, HV=4, K=16, V=12, dtype=torch.float32, gate="scalar", strong=False,
                normalize_keys=True, beta_max=1.0, requires_grad=False):
    """q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV] (or [B, T, HV, K] for gate="key"), a log
    decay in (-1, -0.05) (strong: (-12, -4)); beta [B, T, HV] in (0.1, beta_max)."""
    q = torch.randn(B, T, H, K, dtype=torch.float64)
    k = torch.randn(B, T, H, K, dtype=torch.float64)
    if normalize_keys:
        k = F.normalize(k, dim=-1)
    v = torch.randn(B, T, HV, V, dtype=torch.float64)
    shape = (B, T, HV, K) if gate == "key" else (B, T, HV)
    lo, hi = (-12.0, -4.0) if strong else (-1.0, -0.05)
    g = lo + (hi - lo) * torch.rand(shape, dtype=torch.float64)
    beta = 0.1 + (beta_max - 0.1) * torch.rand(B, T, HV, dtype=torch.float64)
    out = [x.to(dtype) for x in (q, k, v, g, beta)]
    if requires_grad:
        for x in out:
            x.requires_grad_(True)
    return out


def make_state(N, HV, K, V, dtype=torch.float32, requires_grad=False):
    s = (0.5 * torch.randn(N, HV, K, V, dtype=torch.float64)).to(dtype)
    return s.requires_grad_(requires_grad)


def close(actual, expected, tol):
    """Max error relative to the reference's largest magnitude."""
    actual, expected = actual.double(), expected.double()
    scale = expected.abs().max().clamp_min(1e-12)
    err = ((actual - expected).abs().max() / scale).item()
    assert err < tol, f"relative error {err:.3e} >= {tol:.1e}"
