// SPDX-License-Identifier: MIT
/// \file
/// Per-call options shared by every form: scale, chunk size, state in/out, packed batches,
/// state pools and checkpoints (serving), q/k normalisation, threads and the optional input
/// scan.
#pragma once

#include <cstdint>
#include <optional>

#include "config.hpp"
#include "tensor_view.hpp"

namespace linattn {

/// A list of integers in caller memory: 32- or 64-bit entries, any stride, so framework tensors
/// of either type work without copies. The offsets of a packed batch (options::cu_seqlens), the
/// pool slots of the sequences (options::state_indices), accepted draft counts (commit_drafts).
class integer_list_view {
 public:
  constexpr integer_list_view() = default;
  constexpr integer_list_view(tensor_view<const std::int64_t, 1> v)  // NOLINT(google-explicit-constructor)
      : p64_(v.data()), size_(v.extent(0)), stride_(v.stride(0)), given_(v.given()) {}
  constexpr integer_list_view(tensor_view<const std::int32_t, 1> v)  // NOLINT(google-explicit-constructor)
      : p32_(v.data()), size_(v.extent(0)), stride_(v.stride(0)), given_(v.given()) {}
  constexpr integer_list_view(tensor_view<std::int64_t, 1> v)  // NOLINT(google-explicit-constructor)
      : integer_list_view(tensor_view<const std::int64_t, 1>(v)) {}
  constexpr integer_list_view(tensor_view<std::int32_t, 1> v)  // NOLINT(google-explicit-constructor)
      : integer_list_view(tensor_view<const std::int32_t, 1>(v)) {}

  constexpr bool given() const { return given_; }
  constexpr bool null() const { return p64_ == nullptr && p32_ == nullptr; }
  constexpr index_t size() const { return size_; }
  /// Element stride, the first offset's address and its width (for backends that copy them).
  constexpr index_t stride() const { return stride_; }
  constexpr const void* data() const { return p64_ ? static_cast<const void*>(p64_) : static_cast<const void*>(p32_); }
  constexpr bool wide() const { return p64_ != nullptr; }
  constexpr index_t operator[](index_t i) const {
    return p64_ ? static_cast<index_t>(p64_[i * stride_]) : static_cast<index_t>(p32_[i * stride_]);
  }

 private:
  const std::int64_t* p64_ = nullptr;
  const std::int32_t* p32_ = nullptr;
  index_t size_ = 0;
  index_t stride_ = 1;
  bool given_ = false;
};

/// Offsets of a packed variable-length batch (`N + 1` entries, `0 = o_0 <= ... <= o_N = T`).
using seqlens_view = integer_list_view;

/// The epsilon of options::normalize_qk: x / sqrt(||x||^2 + qk_norm_epsilon) (fla's value).
inline constexpr double qk_norm_epsilon = 1e-6;

/// Precision of the tensor-core products of the CUDA chunkwise form with float inputs
/// (options::precision).
enum class product_precision {
  /// fp32 accuracy: each product of fp32 operands runs as three TF32 products (the operand
  /// split into a TF32 head and a TF32 tail), as on the CPU within float rounding.
  exact,
  /// One TF32 product per step: the operands rounded to 10 mantissa bits once (relative error
  /// about 1e-3, like fp16 inputs), as fla and PyTorch's allow_tf32 compute float inputs.
  tf32,
};

/// Options of a call. `Real` is the state type: `float` for float inputs, `double` for double
/// inputs (`la::options opt;` deduces `float`).
template <class Real = float>
struct options {
  /// Multiplies q. Default (unset): 1/sqrt(K).
  std::optional<double> scale{};
  /// Chunk length of the chunkwise forms, 1..256 (the last chunk may be shorter).
  index_t chunk_size = 64;
  /// Optional state at the start of every sequence, `[N, HV, K, V]` (this is S^T per head).
  tensor_view<const Real, 4> initial_state{};
  /// Optional output: state after every sequence, `[N, HV, K, V]`. May alias initial_state.
  tensor_view<Real, 4> final_state{};
  /// Optional packed variable-length batch (requires B == 1); N = size - 1 sequences.
  seqlens_view cu_seqlens{};
  /// Optional state pool addressing (serving; N entries, int32 or int64): the first axis of
  /// the state views (initial_state, final_state, decode_step's `state`) is then a pool of P
  /// slots, `[P, HV, K, V]`, and sequence n reads and writes slot state_indices[n]. A negative
  /// entry starts that sequence from the zero state and writes nothing back (padding). The
  /// non-negative entries must be distinct and < P. In place: initial_state = final_state =
  /// the pool (the same view).
  integer_list_view state_indices{};
  /// Checkpoints (prefix caching, speculative decoding): when > 0, the state of sequence n
  /// after every `checkpoint_every` tokens is written to checkpoints(n, j) (j = 0, 1, ...),
  /// and its state after its last token to the last entry. A multiple of chunk_size for
  /// chunkwise_forward; not available in parallel_forward. 0 = off.
  index_t checkpoint_every = 0;
  /// Output of the checkpoints: `[N, J, HV, K, V]` with J = ceil(L / checkpoint_every), L = T
  /// (L = the longest sequence of a packed batch). Entry j of sequence n is the state after
  /// min((j + 1) checkpoint_every, length_n) tokens; entries j >= ceil(length_n /
  /// checkpoint_every) (shorter packed sequences) are left untouched.
  tensor_view<Real, 5> checkpoints{};
  /// Divide every q and k row (one token, one head; for a rule with several keys per token,
  /// each key) by sqrt(||row||^2 + qk_norm_epsilon) before the rule sees it, as fla's
  /// `use_qk_l2norm_in_kernel` does; the backward forms then give the gradients of the
  /// caller's (unnormalised) q and k. Costs a normalised copy of q and k per call (CPU: in
  /// scratch buffers kept for later calls, linattn::trim_scratch(); CUDA: in the workspace).
  bool normalize_qk = false;
  /// CUDA chunkwise_forward with float inputs: the precision of its tensor-core products
  /// (the unit-lower inverse of the delta rules stays exact in both). 16-bit inputs, the
  /// token-by-token forms, the backward and the CPU compute as they always do and ignore it.
  product_precision precision = product_precision::exact;
  /// Threads to use: 0 = every core the process may run on (its affinity mask); more than that
  /// is capped there. Results do not depend on this.
  int threads = 0;
  /// Scan inputs for NaN/Inf and log gates > 0 before computing (costs one pass over inputs).
  bool check_finite = false;
};

}  // namespace linattn
