// SPDX-License-Identifier: MIT
/// \file
/// Chunkwise form, pass 2 for fp32 inputs (MATH.md §3.2 steps 7-9 and §4.1; 16-bit inputs take
/// chunk_state_mma.cuh): sequential over the chunks of one sequence, for one value head and a block of BV value columns. The state block
/// H = S^T [K, BV] stays in shared memory in fp32 for the whole sequence:
///
///   U~  = U - W H                                   (additive family: U~ = V)
///   O   = scale diag(exp b) Q H + scores U~
///   H  <- exp(b_C) H + K^T diag(exp(b_C - b)) U~
///
/// The next chunk's tiles are copied asynchronously while the current one is computed (two
/// tile buffers where shared memory allows, else one).
#pragma once

#include <type_traits>

#include "../tile/async_copy.cuh"
#include "../tile/block_gemm.cuh"
#include "../tile/load_store.cuh"
#include "chunk_args.cuh"
#include "rule_coefficients.cuh"

namespace linattn::cuda::detail {

/// Shared memory a block may use on sm_90 (227 KiB).
inline constexpr int max_block_smem = 227 * 1024;

template <class Rule, class T, int K, int BV>
struct chunk_state_layout {
  static_assert(std::is_same_v<T, float>, "the WMMA 3xTF32 state pass takes fp32 inputs");
  static constexpr int ldk = K + pad<T>, ldb = BV + pad<T>, ldc = chunk + pad<T>, ldh = BV + 4;
  static constexpr int warps = 16;
  static constexpr int threads = 32 * warps;
  // one buffer of a chunk's tiles
  static constexpr int wq = 0;                                                 // T [2C, ldk]: W rows, then Q rows
  static constexpr int keys = wq + 2 * chunk * ldk * int(sizeof(T));           // T [C, ldk]
  static constexpr int values = keys + chunk * ldk * int(sizeof(T));           // T [C, ldb]: U or V
  static constexpr int scores = values + chunk * ldb * int(sizeof(T));         // T [C, ldc]
  static constexpr int gates = scores + chunk * ldc * int(sizeof(T));          // f32 [C]
  static constexpr int buffer = (gates + chunk * 4 + 127) / 128 * 128;
  // the state and the per-chunk intermediates
  static constexpr int h = 0;                                                  // f32 [K, ldh]
  static constexpr int h_op = h + K * ldh * 4;                                 // T [K, ldb]
  static constexpr int o = h_op + K * ldb * int(sizeof(T));                    // f32 [C, ldh]
  static constexpr int vn = o + chunk * ldh * 4;                               // T [C, ldb]  U~
  static constexpr int vn_decayed = vn + chunk * ldb * int(sizeof(T));         // T [C, ldb]  diag(exp(b_C - b)) U~
  static constexpr int stage = vn_decayed + chunk * ldb * int(sizeof(T));      // f32 [warps, 16x20]
  static constexpr int fixed = (stage + warps * stage_floats * 4 + 127) / 128 * 128;
  static constexpr int buffers = fixed + 2 * buffer <= max_block_smem ? 2 : 1;
  static constexpr int bytes = fixed + buffers * buffer;
  static_assert(gates % 16 == 0, "16-byte gate copies");
};

/// Queues the copies of one chunk's tiles into `buf` (one commit group per thread).
template <class Rule, class T, int K, int BV>
__device__ void load_chunk(unsigned char* buf, const chunk_args<Rule, T>& args, int i, index_t b, int t0, int n,
                           index_t hv, index_t h, index_t v0) {
  using L = chunk_state_layout<Rule, T, K, BV>;
  T* wq = reinterpret_cast<T*>(buf + L::wq);
  if constexpr (corrects<Rule>) {
    load_rows<chunk, K, L::threads>(wq, L::ldk, tensor_view<const T, 4>(args.w), b, t0, n, hv);
    load_rows<chunk, BV, L::threads>(reinterpret_cast<T*>(buf + L::values), L::ldb, tensor_view<const T, 4>(args.u), b, t0, n, hv, v0);
  } else {
    load_rows<chunk, BV, L::threads>(reinterpret_cast<T*>(buf + L::values), L::ldb, args.in.v, b, t0, n, hv, v0);
  }
  load_rows<chunk, K, L::threads>(wq + chunk * L::ldk, L::ldk, args.in.q, b, t0, n, h);
  load_rows<chunk, K, L::threads>(reinterpret_cast<T*>(buf + L::keys), L::ldk, args.in.k, b, t0, n, h);
  load_rows<chunk, chunk, L::threads>(reinterpret_cast<T*>(buf + L::scores), L::ldc, tensor_view<const T, 4>(args.scores), b, t0, n, hv);
  float* gates = reinterpret_cast<float*>(buf + L::gates);
  args.load_gate_cumsum(gates, i, hv, int(threadIdx.x));
  commit_copies();
}

template <class Rule, class T, int K, int BV>
__global__ void __launch_bounds__(512) chunk_state_kernel(chunk_args<Rule, T> args) {
  using L = chunk_state_layout<Rule, T, K, BV>;
  extern __shared__ __align__(128) unsigned char smem[];
  float* hs = reinterpret_cast<float*>(smem + L::h);
  T* h_op = reinterpret_cast<T*>(smem + L::h_op);
  float* o = reinterpret_cast<float*>(smem + L::o);
  T* vn = reinterpret_cast<T*>(smem + L::vn);
  T* vn_decayed = reinterpret_cast<T*>(smem + L::vn_decayed);
  float* stage = reinterpret_cast<float*>(smem + L::stage);

  // value-column blocks fastest: the blocks of one head run together and share its tiles in L2
  const index_t n_seq = blockIdx.z, hv = blockIdx.y, v0 = index_t(blockIdx.x) * BV;
  const index_t h = hv / args.group;
  const span s = args.sequence(n_seq);
  const index_t b = s.b;
  const int tid = int(threadIdx.x);
  const int end = s.start + s.length;

  for (int e = tid; e < K * BV; e += int(blockDim.x)) {
    const int i = e / BV, j = e % BV;
    const float x = args.s0.data() ? args.s0(n_seq, hv, i, v0 + j) : 0.0f;
    hs[i * L::ldh + j] = x;
    h_op[i * L::ldb + j] = from_float<T>(x);
  }
  const auto buffer = [&](int c) { return smem + L::fixed + (c % L::buffers) * L::buffer; };
  if (s.length > 0) load_chunk<Rule, T, K, BV>(buffer(0), args, s.first_chunk, b, s.start, min(chunk, s.length), hv, h, v0);

  for (int c = 0, t0 = s.start; t0 < end; ++c, t0 += chunk) {
    const int n = min(chunk, end - t0);
    if constexpr (L::buffers == 2) {
      if (t0 + chunk < end) {
        load_chunk<Rule, T, K, BV>(buffer(c + 1), args, s.first_chunk + c + 1, b, t0 + chunk, min(chunk, end - t0 - chunk), hv, h, v0);
        wait_copies<1>();
      } else {
        wait_copies<0>();
      }
    } else {
      if (c > 0) load_chunk<Rule, T, K, BV>(buffer(c), args, s.first_chunk + c, b, t0, n, hv, h, v0);
      wait_copies<0>();
    }
    __syncthreads();  // this chunk's tiles are in; the state update of the last chunk is done
    unsigned char* buf = buffer(c);
    const T* wq = reinterpret_cast<const T*>(buf + L::wq);
    const T* keys = reinterpret_cast<const T*>(buf + L::keys);
    const T* values = reinterpret_cast<const T*>(buf + L::values);
    const T* scores = reinterpret_cast<const T*>(buf + L::scores);
    const float* gates = reinterpret_cast<const float*>(buf + L::gates);
    const float last = gates[chunk - 1];
    const float scale = args.scale;

    // [W; Q] H: the first C rows give U~ = U - W H, the next C rows the inter-chunk read.
    auto read = [&](int r, int j, const float (&x)[8]) {
      if (r < chunk) {
        float v[8], d[8];
        load8(values + r * L::ldb + j, v);
        const float to_end = __expf(last - gates[r]);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] -= x[e], d[e] = to_end * v[e];
        store8_aligned(vn + r * L::ldb + j, v);
        store8_aligned(vn_decayed + r * L::ldb + j, d);
      } else {
        const float from_start = scale * __expf(gates[r - chunk]);
#pragma unroll
        for (int e = 0; e < 8; ++e) o[(r - chunk) * L::ldh + j + e] = from_start * x[e];
      }
    };
    if constexpr (corrects<Rule>) {
      block_gemm<T, row_major, row_major, 2 * chunk, BV, K>(wq, L::ldk, h_op, L::ldb, stage, read);
    } else {
      block_gemm<T, row_major, row_major, chunk, BV, K>(wq + chunk * L::ldk, L::ldk, h_op, L::ldb, stage,
                                                        [&](int r, int j, const float (&x)[8]) { read(r + chunk, j, x); });
      for (int e = tid; e < chunk * BV; e += int(blockDim.x)) {
        const int r = e / BV, j = e % BV;
        vn[r * L::ldb + j] = values[r * L::ldb + j];
        vn_decayed[r * L::ldb + j] = from_float<T>(__expf(last - gates[r]) * to_float(values[r * L::ldb + j]));
      }
    }
    __syncthreads();
    // O = read + scores U~ (scores are lower triangular)
    block_gemm<T, row_major, row_major, chunk, BV, chunk, true>(scores, L::ldc, vn, L::ldb, stage,
        [&](int r, int j, const float (&x)[8]) {
          if (r >= n) return;
          float y[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) y[e] = o[r * L::ldh + j + e] + x[e];
          store8(args.out, b, t0 + r, hv, v0 + j, y);
        });
    // H <- exp(b_C) H + K^T diag(exp(b_C - b)) U~
    const float decay = __expf(last);
    block_gemm<T, col_major, row_major, K, BV, chunk>(keys, L::ldk, vn_decayed, L::ldb, stage,
        [&](int i, int j, const float (&x)[8]) {
          float y[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) y[e] = decay * hs[i * L::ldh + j + e] + x[e];
#pragma unroll
          for (int e = 0; e < 8; ++e) hs[i * L::ldh + j + e] = y[e];
          store8_aligned(h_op + i * L::ldb + j, y);
        });
    __syncthreads();  // the buffer of this chunk may be refilled
  }
  __syncthreads();
  if (args.s1.data())
    for (int e = tid; e < K * BV; e += int(blockDim.x)) {
      const int i = e / BV, j = e % BV;
      args.s1(n_seq, hv, i, v0 + j) = hs[i * L::ldh + j];
    }
}

}  // namespace linattn::cuda::detail
