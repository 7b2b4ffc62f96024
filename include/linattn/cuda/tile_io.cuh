// SPDX-License-Identifier: MIT
/// \file
/// Copies between caller views in device memory and shared-memory tiles: rows of a
/// `[B, T, heads, D]` view into a row-major tile, with 16-byte loads where the rows allow.
#pragma once

#include <cstdint>

#include "../core/tensor_view.hpp"
#include "async_copy.cuh"
#include "scalar.cuh"

namespace linattn::cuda::detail {

/// Shared-memory row padding (elements) that keeps rows 16-byte aligned and off one bank.
template <class T>
inline constexpr int pad = 16 / int(sizeof(T));

/// tile[r][c] = x(b, t0 + r, h, c0 + c) for r < n, c < Cols; rows n..Rows-1 are zero-filled.
/// Runs on the whole block (blockDim.x a multiple of the 16-byte pieces per row). Views with
/// unit column stride and 16-byte aligned rows are copied asynchronously (cp.async; the caller
/// commits and waits), others element by element. The caller synchronises before reading.
template <int Rows, int Cols, class T>
__device__ void load_rows(T* tile, int ld, const tensor_view<const T, 4>& x, index_t b, index_t t0, int n,
                          index_t h, index_t c0 = 0) {
  constexpr int vec = 16 / int(sizeof(T));  // elements per 16-byte load
  constexpr int vecs = Cols / vec;          // 16-byte pieces per row
  static_assert(Cols % vec == 0, "tile width must be a multiple of 16 bytes");
  // Each thread keeps one column piece and steps over rows: pointers advance by a fixed step.
  const int threads = int(blockDim.x), tid = int(threadIdx.x);
  const int c = (tid % vecs) * vec, row_step = threads / vecs, first = tid / vecs;
  if (tid >= row_step * vecs) return;
  const int valid = n < Rows ? n : Rows;
  const T* src = &x(b, t0, h, c0 + c);
  const index_t stride_t = x.stride(1);
  const bool direct = x.stride(3) == 1 && (reinterpret_cast<std::uintptr_t>(src) % 16) == 0 &&
                      (stride_t * index_t(sizeof(T))) % 16 == 0;
  if (direct) {
    const T* from = src + first * stride_t;
    T* to = tile + first * ld + c;
    const index_t from_step = index_t(row_step) * stride_t;
    const int to_step = row_step * ld;
    for (int r = first; r < valid; r += row_step, from += from_step, to += to_step) copy_async_16(to, from);
  } else {
    for (int r = first; r < valid; r += row_step)
#pragma unroll
      for (int i = 0; i < vec; ++i) tile[r * ld + c + i] = x(b, t0 + r, h, c0 + c + i);
  }
  // rows past the sequence are zero
  int r = first;
  if (valid > first) r += (valid - first + row_step - 1) / row_step * row_step;
  for (; r < Rows; r += row_step) *reinterpret_cast<uint4*>(tile + r * ld + c) = make_uint4(0, 0, 0, 0);
}

/// v[0..8) = tile[0..8) as floats (16-byte aligned shared memory).
template <class T>
__device__ inline void load8(const T* tile, float (&v)[8]) {
  if constexpr (sizeof(T) == 2) {
    alignas(16) T packed[8];
    *reinterpret_cast<uint4*>(packed) = *reinterpret_cast<const uint4*>(tile);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = to_float(packed[e]);
  } else {
    const float4 a = reinterpret_cast<const float4*>(tile)[0], b = reinterpret_cast<const float4*>(tile)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
}

/// dst[0..8) = v converted to T, with 16-byte stores (dst must be 16-byte aligned).
template <class T>
__device__ inline void store8_aligned(T* dst, const float (&v)[8]) {
  if constexpr (sizeof(T) == 2) {
    alignas(16) T packed[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) packed[e] = from_float<T>(v[e]);
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(packed);
  } else {
    reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
}

/// x(b, t, h, c .. c+7) = v: 16-byte stores when the row is contiguous and aligned there,
/// else element by element.
template <class T>
__device__ inline void store8(const tensor_view<T, 4>& x, index_t b, index_t t, index_t h, index_t c,
                              const float (&v)[8]) {
  T* dst = &x(b, t, h, c);
  if (x.stride(3) == 1 && reinterpret_cast<std::uintptr_t>(dst) % 16 == 0) {
    store8_aligned(dst, v);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) x(b, t, h, c + e) = from_float<T>(v[e]);
  }
}

}  // namespace linattn::cuda::detail
