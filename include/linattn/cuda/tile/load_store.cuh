// SPDX-License-Identifier: MIT
/// \file
/// Copies between caller views in device memory and shared-memory tiles: rows of a
/// `[B, T, heads, D]` view into a row-major tile, with 16-byte loads where the rows allow.
#pragma once

#include <cstdint>

#include "../../core/tensor_view.hpp"
#include "async_copy.cuh"
#include "scalar.cuh"

namespace linattn::cuda::detail {

/// Shared-memory row padding (elements) that keeps rows 16-byte aligned and off one bank.
template <class T>
inline constexpr int pad = 16 / int(sizeof(T));

/// A thread's part of copying rows of a `[B, T, heads, D]` view into a row-major tile
/// [Rows, ld], worked out once for every chunk of one batch row, head and column range: its
/// 16-byte column piece and first row, the view's element at token 0 and whether the view
/// allows cp.async (unit column stride, 16-byte aligned rows). Runs on `Threads` threads (the
/// block, or the warps of one role: `tid` counts from 0 in them); each keeps one column piece
/// and steps over rows by a compile-time count. A sequential pass makes its sources before its
/// loop over chunks, so each chunk's copies (issue) cost one pointer offset and a copy (or
/// zero store) per row step, not the view's whole 64-bit index.
template <int Rows, int Cols, int Threads, class T>
struct row_source {
  static constexpr int vec = 16 / int(sizeof(T));  // elements per 16-byte load
  static constexpr int vecs = Cols / vec;          // 16-byte pieces per row
  static_assert(Cols % vec == 0, "tile width must be a multiple of 16 bytes");
  static_assert(Threads % vecs == 0, "the block must cover whole rows");
  static constexpr int row_step = Threads / vecs, steps = (Rows + row_step - 1) / row_step;
  const T* origin;  // x(b, 0, h, c0): the same for the whole block (uniform registers)
  int first, c;     // the thread's first row and column of the tile
  bool direct;      // cp.async, else element by element

  __device__ row_source(const tensor_view<const T, 4>& x, index_t b, index_t h, index_t c0 = 0,
                        int tid = int(threadIdx.x))
      : origin(&x(b, 0, h, c0)), first(tid / vecs), c((tid % vecs) * vec),
        direct(x.stride(3) == 1 && (reinterpret_cast<std::uintptr_t>(origin) % 16) == 0 &&
               (x.stride(1) * index_t(sizeof(T))) % 16 == 0) {}

  /// tile[r][c] = x(b, t0 + r, h, c0 + c) for r < n, c < Cols; rows n..Rows-1 are zero-filled
  /// (x: the view the source was made for). cp.async copies are the caller's to commit and
  /// wait for; the caller synchronises before reading.
  __device__ void issue(T* tile, int ld, const tensor_view<const T, 4>& x, index_t t0, int n) const {
    const int valid = n < Rows ? n : Rows;
    const index_t ts = x.stride(1);
    const T* p = origin + (t0 + first) * ts;
    T* to = tile + first * ld + c;
    if (direct) {
      p += c;
#pragma unroll
      for (int i = 0; i < steps; ++i, p += index_t(row_step) * ts, to += row_step * ld) {
        const int r = first + i * row_step;
        if (Rows % row_step != 0 && r >= Rows) break;
        if (r < valid) copy_async_16(to, p);
        else *reinterpret_cast<uint4*>(to) = make_uint4(0, 0, 0, 0);  // rows past the sequence are zero
      }
    } else {  // rolled up: a rare layout, which should not hold registers over the caller's loop
#pragma unroll 1
      for (int r = first; r < Rows; r += row_step, p += index_t(row_step) * ts)
#pragma unroll 1
        for (int i = 0; i < vec; ++i)
          tile[r * ld + c + i] = r < valid ? p[index_t(c + i) * x.stride(3)] : from_float<T>(0.0f);
    }
  }
};

/// tile[r][c] = x(b, t0 + r, h, c0 + c) for r < n, c < Cols; rows n..Rows-1 are zero-filled:
/// a row_source used once. Views with unit column stride and 16-byte aligned rows are copied
/// asynchronously (cp.async; the caller commits and waits), others element by element. The
/// caller synchronises before reading.
template <int Rows, int Cols, int Threads, class T>
__device__ void load_rows(T* tile, int ld, const tensor_view<const T, 4>& x, index_t b, index_t t0, int n,
                          index_t h, index_t c0 = 0, int tid = int(threadIdx.x)) {
  row_source<Rows, Cols, Threads, T>(x, b, h, c0, tid).issue(tile, ld, x, t0, n);
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

/// v = x(b, t, h, c .. c+7) as floats: 16-byte loads (fp32: two) when the row is contiguous
/// and aligned there, else eight independent element loads.
template <class T>
__device__ inline void load8(const tensor_view<const T, 4>& x, index_t b, index_t t, index_t h, index_t c,
                             float (&v)[8]) {
  const T* src = &x(b, t, h, c);
  if (x.stride(3) == 1 && reinterpret_cast<std::uintptr_t>(src) % 16 == 0) {
    load8(src, v);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = to_float(x(b, t, h, c + e));
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
