// SPDX-License-Identifier: MIT
/// \file
/// A double-double number for long running sums of log gates: hi + lo with |lo| <= ulp(hi) / 2,
/// added and subtracted without rounding error in the pair (Knuth's two-sum), so the
/// difference of two such sums is exact where they are close, however large they have grown.
#pragma once

namespace linattn::cpu {

struct exact_sum {
  double hi = 0, lo = 0;

  /// The nearest double.
  double value() const { return hi + lo; }

  friend exact_sum operator+(exact_sum x, exact_sum y) {
    const double s = x.hi + y.hi;
    const double z = s - x.hi;
    const double err = (x.hi - (s - z)) + (y.hi - z);  // x.hi + y.hi = s + err exactly
    return normalised(s, err + x.lo + y.lo);
  }
  friend exact_sum operator-(exact_sum x, exact_sum y) { return x + exact_sum{-y.hi, -y.lo}; }
  friend bool operator<(exact_sum x, exact_sum y) { return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo); }

 private:
  /// hi + lo as a pair whose hi is their rounded sum (fast two-sum; |hi| >= |lo|).
  static exact_sum normalised(double hi, double lo) {
    const double s = hi + lo;
    return {s, lo - (s - hi)};
  }
};

}  // namespace linattn::cpu
