// SPDX-License-Identifier: MIT
/// \file
/// The rules' per-element work written so that it compiles to SIMD code: elementwise functions
/// without branches (the C library's versions are calls, one element at a time), e.g. one log
/// per key dimension and token, and a row's sum of squares as independent partial sums (one
/// dependent add per element would bound it by the add's latency).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

namespace linattn {

namespace detail {

/// c ? a : b, chosen by bits rather than by a branch (a and b are both computed already).
inline double select_bits(bool c, double a, double b) {
  const std::uint64_t m = std::uint64_t(0) - std::uint64_t(c);
  return std::bit_cast<double>((std::bit_cast<std::uint64_t>(a) & m) | (std::bit_cast<std::uint64_t>(b) & ~m));
}

}  // namespace detail

/// log(1 + x) for x in [-1, 0], within 4 ulp of std::log1p (-inf at x = -1). With u = 1 + x =
/// m 2^e, m in [sqrt(1/2), sqrt(2)): log u = e log 2 + 2 atanh((m - 1) / (m + 1)), the series to
/// z^11 (|s| <= 0.172); then log1p(x) = log(u) x / (u - 1), which restores the bits of x that
/// rounding 1 + x lost (x itself when u rounds to 1).
inline double log1p_nonpositive(double x) {
  const double u = 1.0 + x;
  const std::uint64_t bits = std::bit_cast<std::uint64_t>(u);
  const double m1 = std::bit_cast<double>((bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);  // [1, 2)
  const bool above = m1 > 1.4142135623730951;
  const double m = detail::select_bits(above, 0.5 * m1, m1);
  const double e = double(std::int64_t(bits >> 52) - 1023 + std::int64_t(above));
  const double s = (m - 1.0) / (m + 1.0), z = s * s;
  double p = 1.0 / 23;  // Horner over the odd reciprocals 1/21 .. 1/3, unrolled at compile time
  [&]<int... j>(std::integer_sequence<int, j...>) { ((p = p * z + 1.0 / (21 - 2 * j)), ...); }(std::make_integer_sequence<int, 10>{});
  const double log_m = 2.0 * s + 2.0 * s * z * p;
  // log 2 in two parts: the first has 32 significant bits, so e times it is exact
  const double log_u = e * 6.93147180369123816490e-01 + (e * 1.90821492927058770002e-10 + log_m);
  const double c = u - 1.0;
  const bool exact = c == 0.0;
  const double r = log_u * (x / detail::select_bits(exact, 1.0, c));
  return detail::select_bits(u == 0.0, -std::numeric_limits<double>::infinity(), detail::select_bits(exact, x, r));
}

/// sum of x[d * stride]^2 over d in [0, n), in double. Eight partial sums (one per d mod 8),
/// added in a fixed tree at the end: a contiguous row compiles to SIMD code instead of one
/// dependent add per element, and the result depends on x alone (not on threads or calls).
template <class T>
double squared_norm(const T* x, std::ptrdiff_t stride, std::ptrdiff_t n) {
  double part[8] = {};
  std::ptrdiff_t d = 0;
  if (stride == 1)  // whole groups of eight, in the form the compiler vectorises
    for (; d + 8 <= n; d += 8)
      for (int j = 0; j < 8; ++j) part[j] += static_cast<double>(x[d + j]) * static_cast<double>(x[d + j]);
  for (; d < n; ++d) {
    const double v = static_cast<double>(x[d * stride]);
    part[d % 8] += v * v;
  }
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
}

}  // namespace linattn
