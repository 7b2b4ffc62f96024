# SPDX-License-Identifier: MIT
"""linattn for PyTorch: fla's functions (same names, arguments, defaults and returns) backed by
linattn's kernels, with autograd and torch.compile support. `import linattn.torch as fla_ops`.

docs/python.md says what runs where (CPU, CUDA) and in which precision.
"""

from ._backend import check_inputs, cuda_available
from .gated_delta import (chunk_delta_rule, chunk_gated_delta_rule, fused_recurrent_delta_rule,
                          fused_recurrent_gated_delta_rule)
from .gla import chunk_gla, chunk_linear_attn, chunk_simple_gla
from .kda import chunk_kda, fused_recurrent_kda
from .regression import (chunk_longhorn, chunk_nlms, chunk_rls, fused_recurrent_longhorn, fused_recurrent_nlms,
                         fused_recurrent_rls)
from .ttt import chunk_ttt_linear, fused_recurrent_ttt_linear

__all__ = [
    "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "chunk_delta_rule", "fused_recurrent_delta_rule",
    "chunk_simple_gla", "chunk_gla", "chunk_linear_attn", "chunk_kda", "fused_recurrent_kda",
    "chunk_longhorn", "fused_recurrent_longhorn", "chunk_nlms", "fused_recurrent_nlms", "chunk_rls",
    "fused_recurrent_rls", "chunk_ttt_linear", "fused_recurrent_ttt_linear", "cuda_available", "check_inputs",
]
