// SPDX-License-Identifier: MIT
/// \file
/// Sums over the 32 lanes of a warp in fp32 registers (shuffles): the total, in every lane,
/// and each lane's inclusive prefix or suffix sum.
#pragma once

namespace linattn::cuda::detail {

/// The warp's sum of x over its 32 lanes, in every lane.
__device__ inline float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/// x of lanes 0..lane summed, in lane `lane` (a warp scan).
__device__ inline float warp_prefix_sum(float x, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float up = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += up;
  }
  return x;
}

/// The inclusive prefix sums of 64 values held two per lane (a in lane l is value 2 l, b value
/// 2 l + 1): the sums up to a and up to b, in lane `lane`.
__device__ inline float2 warp_pair_prefix_sums(float a, float b, int lane) {
  const float pair = a + b, run = warp_prefix_sum(pair, lane);
  return make_float2(run - pair + a, run);
}

/// x of lanes lane..31 summed, in lane `lane` (a warp scan from the last lane down).
__device__ inline float warp_suffix_sum(float x, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float down = __shfl_down_sync(0xffffffffu, x, o);
    if (lane + o < 32) x += down;
  }
  return x;
}

}  // namespace linattn::cuda::detail
