// SPDX-License-Identifier: MIT
/// \file
/// options::normalize_qk for the CUDA calls: `normalized_qk` queues the normalised copies of q
/// and k (workspace from the library's pool, 2 B T H K input-type elements) and hands the
/// kernels the inputs with q and k replaced; `chain_qk_normalization` queues the backward
/// through the normalisation on the gradients dq and dk, in place.
#pragma once

#include <cuda_runtime.h>

#include <optional>
#include <string>
#include <type_traits>

#include "../../core/error.hpp"
#include "../kernels/qk_normalization.cuh"
#include "launch.cuh"
#include "workspace_pool.cuh"

namespace linattn::cuda::detail {

/// Queues `kernel` over the rows (tokens x heads) of the `[B, T, H, D]` view x.
template <class E, class... Args>
void launch_rows(void (*kernel)(Args...), const tensor_view<const E, 4>& x, cudaStream_t stream, const char* name,
                 std::type_identity_t<Args>... args) {
  const index_t rows = x.extent(0) * x.extent(1) * x.extent(2), D = x.extent(3);
  if (D > 32 * row_norm_per_lane)  // the call's validation allows K <= 128 only
    throw error(std::string("linattn::cuda: ") + name + " takes rows of at most " +
                std::to_string(32 * row_norm_per_lane) + " elements, got " + std::to_string(D));
  if (rows == 0) return;
  const dim3 grid(unsigned((rows + row_norm_warps - 1) / row_norm_warps));
  kernel<<<grid, 32 * row_norm_warps, 0, stream>>>(args...);
  check_launch(name);
}

/// The inputs a CUDA call's kernels read: the caller's, or with options::normalize_qk a copy
/// whose q and k view normalised copies in this object's workspace (freed, stream-ordered,
/// when it goes out of scope after the call's launches).
template <class Inputs>
class normalized_qk {
  using E = typename decltype(Inputs::q)::value_type;

 public:
  normalized_qk(const Inputs& in, bool normalize, cudaStream_t stream)
      : in_(in), spans_(plan(in)), ws_(normalize ? spans_.bytes : 0, stream) {
    if (!normalize) return;
    copy_.emplace(in);
    copy_->q = normalize_into(in.q, ws_.at(spans_.q), stream);
    copy_->k = normalize_into(in.k, ws_.at(spans_.k), stream);
  }
  normalized_qk(const normalized_qk&) = delete;
  normalized_qk& operator=(const normalized_qk&) = delete;

  const Inputs& inputs() const { return copy_ ? *copy_ : in_; }

 private:
  struct spans {
    workspace_span<E> q, k;
    std::size_t bytes = 0;
  };
  static spans plan(const Inputs& in) {
    workspace_layout l;
    spans s;
    s.q = l.take<E>(std::size_t(in.q.size()));
    s.k = l.take<E>(std::size_t(in.k.size()));
    s.bytes = l.bytes;
    return s;
  }
  static tensor_view<const E, 4> normalize_into(const tensor_view<const E, 4>& x, E* out, cudaStream_t stream) {
    launch_rows(normalize_rows_kernel<E>, x, stream, "normalize_rows_kernel", x, out);
    return tensor_view<const E, 4>(out, x.extents(), contiguous_strides(x.extents()));
  }

  const Inputs& in_;
  spans spans_;
  scratch ws_;
  std::optional<Inputs> copy_;
};

/// After a backward ran on the normalised q and k: grads.dq and grads.dk become the
/// gradients of the caller's q and k.
template <class Inputs, class Gradients>
void chain_qk_normalization(const Inputs& in, const Gradients& grads, cudaStream_t stream) {
  using E = typename decltype(Inputs::q)::value_type;
  launch_rows(chain_normalization_kernel<E>, in.q, stream, "chain_normalization_kernel", in.q, grads.dq);
  launch_rows(chain_normalization_kernel<E>, in.k, stream, "chain_normalization_kernel", in.k, grads.dk);
}

}  // namespace linattn::cuda::detail
