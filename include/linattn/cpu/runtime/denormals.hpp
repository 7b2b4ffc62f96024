// SPDX-License-Identifier: MIT
/// \file
/// Scoped flush-to-zero for subnormal floats. Decay factors between distant tokens fall below
/// the smallest normal float (exp(-87)) and subnormal arithmetic is 10-100x slower on x86;
/// flushing changes results only below 1.2e-38 (float) / 2.2e-308 (double), far under every
/// tolerance. The previous mode is restored, so the caller's thread is left as it was.
#pragma once

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define LINATTN_HAS_MXCSR 1
#endif

namespace linattn::cpu {

class flush_denormals {
 public:
#ifdef LINATTN_HAS_MXCSR
  flush_denormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | ftz_daz); }
  ~flush_denormals() { _mm_setcsr(saved_); }
#endif
  flush_denormals(const flush_denormals&) = delete;
  flush_denormals& operator=(const flush_denormals&) = delete;

 private:
#ifdef LINATTN_HAS_MXCSR
  static constexpr unsigned ftz_daz = 0x8040;  // flush-to-zero (bit 15), denormals-are-zero (bit 6)
  unsigned saved_;
#endif
};

}  // namespace linattn::cpu
