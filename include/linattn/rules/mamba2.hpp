// SPDX-License-Identifier: MIT
/// \file
/// Mamba-2 (SSD) is scalar-decay linear attention (docs/math.md#mamba2): per value head hv
/// with A = -exp(A_log[hv]) and Delta_t = softplus(dt_t + dt_bias[hv]),
///
///   S_t = exp(Delta_t A) S_{t-1} + Delta_t x_t B_t^T,    y_t = S_t C_t (+ D x_t, outside)
///
/// which is `ScalarDecay` with q = C, k = B, g_t = Delta_t A and v_t = Delta_t x_t.
/// `mamba2_to_scalar_decay` fills g and v from Mamba-2's parameters; then call any ScalarDecay
/// form (scale 1: SSD does not scale C) with q = C, k = B.
#pragma once

#include <cmath>
#include <string>

#include "../core/error.hpp"
#include "../core/tensor_view.hpp"
#include "../core/view_checks.hpp"

namespace linattn {

/// g[b, t, hv] = -exp(A_log[hv]) softplus(dt[b, t, hv] + dt_bias[hv]) and
/// v[b, t, hv, :] = softplus(dt[b, t, hv] + dt_bias[hv]) x[b, t, hv, :], in double, rounded
/// once. Shapes: dt [B, T, HV], dt_bias [HV], A_log [HV], x [B, T, HV, V]; g [B, T, HV] and
/// v [B, T, HV, V] are outputs (any strides, distinct elements, not overlapping the inputs;
/// v may be x itself, in place).
/// Throws linattn::error naming the argument before writing anything.
template <class T>
void mamba2_to_scalar_decay(tensor_view<const T, 3> dt, tensor_view<const T, 1> dt_bias, tensor_view<const T, 1> A_log,
                            tensor_view<const T, 4> x, tensor_view<T, 3> g, tensor_view<T, 4> v) {
  const auto fail = [](const std::string& what) { throw error("linattn::mamba2_to_scalar_decay: " + what); };
  const index_t B = dt.extent(0), L = dt.extent(1), HV = dt.extent(2), V = x.extent(3);
  const auto expect = [&](const char* name, const auto& view, std::initializer_list<index_t> want, const char* text) {
    for (index_t e : view.extents())
      if (e < 0) fail(std::string(name) + " has shape " + detail::shape_string(view.extents()) + ", a negative extent");
    index_t d = 0;
    for (index_t w : want)
      if (view.extent(int(d++)) != w) fail(std::string(name) + " has shape " + detail::shape_string(view.extents()) + ", expected " + text);
    if (!detail::fits_index(view)) fail(std::string(name) + ": its element count or address reach overflows the index type");
    if (view.size() > 0 && view.data() == nullptr) fail(std::string(name) + " has elements but a null data pointer");
  };
  expect("dt", dt, {B, L, HV}, "[B, T, HV]");
  expect("dt_bias", dt_bias, {HV}, "[HV] (HV from dt)");
  expect("A_log", A_log, {HV}, "[HV] (HV from dt)");
  expect("x", x, {B, L, HV, V}, "[B, T, HV, V] (B, T, HV from dt)");
  expect("g", g, {B, L, HV}, "[B, T, HV] (the shape of dt)");
  expect("v", v, {B, L, HV, V}, "[B, T, HV, V] (the shape of x)");
  const detail::memory_region outs[] = {detail::region_of("g", g), detail::region_of("v", v)};
  const detail::memory_region ins[] = {detail::region_of("dt", dt), detail::region_of("dt_bias", dt_bias),
                                       detail::region_of("A_log", A_log), detail::region_of("x", x)};
  for (const auto& o : outs) {
    if (!o.distinct()) fail(std::string(o.name) + " has strides " + o.stride_string() + " that address one element twice");
    for (const auto& i : ins) {
      const bool in_place = std::string(o.name) == "v" && std::string(i.name) == "x" && o.same_elements(i);
      if (!in_place && detail::overlaps(o, i)) fail(std::string(o.name) + " overlaps the input " + i.name);
    }
  }
  if (detail::overlaps(outs[0], outs[1])) fail("g overlaps v");
  const auto softplus = [](double z) { return z > 20 ? z : std::log1p(std::exp(z)); };
  for (index_t b = 0; b < B; ++b)
    for (index_t t = 0; t < L; ++t)
      for (index_t hv = 0; hv < HV; ++hv) {
        const double delta = softplus(double(dt(b, t, hv)) + double(dt_bias(hv)));
        g(b, t, hv) = static_cast<T>(-std::exp(double(A_log(hv))) * delta);
        for (index_t j = 0; j < V; ++j) v(b, t, hv, j) = static_cast<T>(delta * double(x(b, t, hv, j)));
      }
}

}  // namespace linattn
