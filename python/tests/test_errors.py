# SPDX-License-Identifier: MIT
"""Bad calls raise ValueError naming the argument (from the Python layer or the library's own
checks), before anything is computed."""

import pytest
import torch

import linattn.torch as la
from conftest import make_inputs, make_state


def test_heads_not_a_multiple():
    q, k, v, g, beta = make_inputs(H=2, HV=3)
    with pytest.raises(ValueError, match="'v'"):
        la.chunk_gated_delta_rule(q, k, v, g, beta)


def test_key_shape_mismatch():
    q, k, v, g, beta = make_inputs()
    with pytest.raises(ValueError, match="'k'"):
        la.chunk_gated_delta_rule(q, k[..., :8], v, g, beta)


def test_gate_shape_mismatch():
    q, k, v, g, beta = make_inputs()
    with pytest.raises(ValueError, match="'g'"):
        la.chunk_gated_delta_rule(q, k, v, g[:, :5], beta)


@pytest.fixture
def value_checks():
    previous = la.check_inputs(True)
    yield
    la.check_inputs(previous)


def test_positive_log_gate(value_checks):
    q, k, v, g, beta = make_inputs()
    with pytest.raises(ValueError, match="'g'"):
        la.chunk_simple_gla(q, k, v, g.abs() + 0.5)


def test_negative_beta(value_checks):
    q, k, v, g, beta = make_inputs()
    with pytest.raises(ValueError, match="'beta'"):
        la.chunk_delta_rule(q, k, v, -beta)


def test_nan_input(value_checks):
    q, k, v, g, beta = make_inputs()
    v[0, 3, 1, 2] = float("nan")
    with pytest.raises(ValueError, match="'v'"):
        la.chunk_gated_delta_rule(q, k, v, g, beta)


def test_wrong_rank():
    q, k, v, g, beta = make_inputs()
    with pytest.raises(ValueError, match="'beta'"):
        la.chunk_delta_rule(q, k, v, beta[..., None])
    with pytest.raises(ValueError, match="'q'"):
        la.chunk_delta_rule(q[0], k, v, beta)


def test_initial_state_shape():
    q, k, v, g, beta = make_inputs()
    with pytest.raises(ValueError, match="'initial_state'"):
        la.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=make_state(2, 4, 16, 5))


def test_packed_batch_errors():
    q, k, v, g, beta = make_inputs(B=1, T=20)
    with pytest.raises(ValueError, match="'cu_seqlens'"):
        la.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 12, 9, 20]))
    with pytest.raises(ValueError, match="'cu_seqlens'"):
        la.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=torch.tensor([0.0, 20.0]))
    with pytest.raises(ValueError, match="'initial_state'"):
        la.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 12, 20]),
                                  initial_state=make_state(3, 4, 16, 12))
    q2, k2, v2, g2, b2 = make_inputs(B=2, T=20)
    with pytest.raises(ValueError, match="'q'"):
        la.chunk_gated_delta_rule(q2, k2, v2, g2, b2, cu_seqlens=torch.tensor([0, 12, 20]))


def test_not_a_tensor_and_integer_dtype():
    q, k, v, g, beta = make_inputs()
    with pytest.raises(ValueError, match="'v'"):
        la.chunk_gated_delta_rule(q, k, v.tolist(), g, beta)
    with pytest.raises(ValueError, match="'q'"):
        la.chunk_gated_delta_rule(q.to(torch.int32), k, v, g, beta)


def test_scalar_parameters():
    q, k, v, g, beta = make_inputs()
    with pytest.raises(ValueError, match="'eps_k'"):
        la.chunk_nlms(q, k, v, eps_k=0.0)
    with pytest.raises(ValueError, match="'delta'"):
        la.chunk_rls(q, k, v, delta=-1.0)
    with pytest.raises(ValueError, match="'scale'"):
        la.fused_recurrent_delta_rule(q, k, v, beta, scale=-1.0)


def test_chunk_size_range():
    q, k, v, g, beta = make_inputs()
    with pytest.raises(ValueError, match="chunk_size"):
        la.chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=1000)


def test_unknown_keyword():
    q, k, v, g, beta = make_inputs()
    with pytest.raises(TypeError, match="nonsense"):
        la.chunk_gated_delta_rule(q, k, v, g, beta, nonsense=1)


def test_unsupported_gates_are_explicit():
    q, k, v, g, beta = make_inputs()
    with pytest.raises(NotImplementedError, match="gk"):
        la.fused_recurrent_gated_delta_rule(q, k, v, gk=g[..., None].expand(*g.shape, 16), beta=beta)


@pytest.mark.parametrize("z_shape", [(2, 1, 2, 3), (1, 1, 2, 16), (2, 5, 2, 16), (2, 1, 4, 16)])
def test_linear_attn_key_sum_shape(z_shape):
    """normalize=True: the key sum z of initial_state=(state, z) must be [N, 1, H, K]; a z that
    torch would broadcast (N = 1 for two sequences) is rejected too."""
    q, k, v, _, _ = make_inputs(HV=2)
    state = torch.randn(2, 2, 16, 12)
    with pytest.raises(ValueError, match="'initial_state'"):
        la.chunk_linear_attn(q, k, v, initial_state=(state, torch.rand(z_shape)), output_final_state=True)
