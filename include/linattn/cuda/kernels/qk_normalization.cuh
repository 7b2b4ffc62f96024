// SPDX-License-Identifier: MIT
/// \file
/// options::normalize_qk on the device: one warp per row (one token and head of a `[B, T, H, D]`
/// view, any strides), fp32 sums. `normalize_rows_kernel` writes x / sqrt(||x||^2 + eps) to a
/// contiguous copy; `chain_normalization_kernel` turns, in place, the gradient of that copy into
/// the gradient of x: dx <- (dx - x (x . dx) / r^2) / r, r = sqrt(||x||^2 + eps).
#pragma once

#include "../../core/options.hpp"
#include "../../core/tensor_view.hpp"
#include "../tile/scalar.cuh"
#include "../tile/warp_sums.cuh"

namespace linattn::cuda::detail {

inline constexpr int row_norm_warps = 8;  // rows (warps) per block

/// The row this warp owns, as (b, t, h); false past the last row.
__device__ inline bool row_of_warp(index_t T, index_t H, index_t rows, index_t& b, index_t& t, index_t& h) {
  const index_t r = index_t(blockIdx.x) * row_norm_warps + threadIdx.x / 32;
  if (r >= rows) return false;
  h = r % H;
  t = (r / H) % T;
  b = r / (H * T);
  return true;
}

/// A row of at most 32 * row_norm_per_lane elements, lane l holding elements l + 32 j (loads
/// coalesced across the warp, each element read once) in fp32 registers.
inline constexpr int row_norm_per_lane = 4;  // D <= 128: the CUDA kernels' head sizes

template <class E>
struct lane_row {
  float x[row_norm_per_lane];

  template <class V>  // a tensor_view of E or const E
  __device__ void load(const V& v, index_t b, index_t t, index_t h, int lane) {
    for (int j = 0; j < row_norm_per_lane; ++j) {
      const index_t d = lane + 32 * j;
      x[j] = d < v.extent(3) ? to_float(v(b, t, h, d)) : 0.0f;
    }
  }
  /// This lane's part of the dot product with another row.
  __device__ float dot(const lane_row& o) const {
    float s = 0;
    for (int j = 0; j < row_norm_per_lane; ++j) s += x[j] * o.x[j];
    return s;
  }
};

/// out (contiguous `[B, T, H, D]`) <- x with every row divided by sqrt(||row||^2 + eps).
template <class E>
__global__ void __launch_bounds__(32 * row_norm_warps) normalize_rows_kernel(tensor_view<const E, 4> x, E* out) {
  const index_t T = x.extent(1), H = x.extent(2), D = x.extent(3);
  index_t b, t, h;
  if (!row_of_warp(T, H, x.extent(0) * T * H, b, t, h)) return;
  const int lane = threadIdx.x % 32;
  lane_row<E> r;
  r.load(x, b, t, h, lane);
  const float inv = rsqrtf(warp_sum(r.dot(r)) + float(qk_norm_epsilon));
  E* row = out + ((b * T + t) * H + h) * D;
  for (int j = 0; j < row_norm_per_lane; ++j)
    if (lane + 32 * j < D) row[lane + 32 * j] = from_float<E>(r.x[j] * inv);
}

/// dx <- the gradient of x from the gradient of its normalised copy, row by row, in place.
template <class E>
__global__ void __launch_bounds__(32 * row_norm_warps)
    chain_normalization_kernel(tensor_view<const E, 4> x, tensor_view<E, 4> dx) {
  const index_t T = x.extent(1), H = x.extent(2), D = x.extent(3);
  index_t b, t, h;
  if (!row_of_warp(T, H, x.extent(0) * T * H, b, t, h)) return;
  const int lane = threadIdx.x % 32;
  lane_row<E> r, g;
  r.load(x, b, t, h, lane);
  g.load(dx, b, t, h, lane);
  const float r2 = warp_sum(r.dot(r)) + float(qk_norm_epsilon), inv = rsqrtf(r2), c = warp_sum(r.dot(g)) / r2;
  for (int j = 0; j < row_norm_per_lane; ++j)
    if (lane + 32 * j < D) dx(b, t, h, lane + 32 * j) = from_float<E>((g.x[j] - r.x[j] * c) * inv);
}

}  // namespace linattn::cuda::detail
