// SPDX-License-Identifier: MIT
/// \file
/// Argument validation shared by every form. Everything is checked before anything is
/// written; each failure throws `linattn::error` naming the argument, what it got and what
/// was expected.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "error.hpp"
#include "options.hpp"
#include "problem.hpp"
#include "tensor_view.hpp"

namespace linattn::detail {

template <std::size_t R>
std::string shape_string(const std::array<index_t, R>& e) {
  std::string s = "[";
  for (std::size_t d = 0; d < R; ++d) s += (d ? ", " : "") + std::to_string(e[d]);
  return s + "]";
}

/// Address range [lo, hi) touched by a view; empty (lo == hi) when it has no elements.
template <class T, int R>
std::pair<std::uintptr_t, std::uintptr_t> byte_range(const tensor_view<T, R>& v) {
  if (v.size() == 0 || v.data() == nullptr) return {0, 0};
  index_t lo = 0, hi = 0;
  for (int d = 0; d < R; ++d) {
    const index_t reach = v.stride(d) * (v.extent(d) - 1);
    (reach < 0 ? lo : hi) += reach;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(v.data());
  const auto sz = static_cast<std::intptr_t>(sizeof(T));
  return {base + static_cast<std::uintptr_t>(lo * sz), base + static_cast<std::uintptr_t>((hi + 1) * sz)};
}

using address_range = std::pair<std::uintptr_t, std::uintptr_t>;

inline bool overlaps(const address_range& ra, const address_range& rb) {
  if (ra.first == ra.second || rb.first == rb.second) return false;
  return ra.first < rb.second && rb.first < ra.second;
}

template <class A, int RA, class B, int RB>
bool overlaps(const tensor_view<A, RA>& a, const tensor_view<B, RB>& b) {
  return overlaps(byte_range(a), byte_range(b));
}

/// True when no two index tuples of the view address the same element (outputs need this).
template <class T, int R>
bool distinct_elements(const tensor_view<T, R>& v) {
  if (v.size() == 0) return true;  // e.g. T = 0 with B > 1: contiguous strides contain a 0
  std::array<std::pair<index_t, index_t>, R> dims{};  // (|stride|, extent)
  int n = 0;
  for (int d = 0; d < R; ++d)
    if (v.extent(d) > 1) dims[n++] = {v.stride(d) < 0 ? -v.stride(d) : v.stride(d), v.extent(d)};
  for (int i = 1; i < n; ++i)  // insertion sort: at most 4 entries
    for (int j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
  index_t span = 1;  // elements covered by the dims seen so far
  for (int i = 0; i < n; ++i) {
    if (dims[i].first < span) return false;
    span = dims[i].first * (dims[i].second - 1) + span;
  }
  return true;
}

/// Calls f(value, index-array) for every element of a view.
template <class T, int R, class F>
void for_each_element(const tensor_view<T, R>& v, F&& f) {
  if (v.size() == 0) return;
  std::array<index_t, R> i{};
  for (;;) {
    index_t off = 0;
    for (int d = 0; d < R; ++d) off += i[d] * v.stride(d);
    f(v.data()[off], i);
    int d = R - 1;
    while (d >= 0 && ++i[d] == v.extent(d)) i[d--] = 0;
    if (d < 0) return;
  }
}

/// Last extent of a rule's state `[N, HV, K, cols]`: V for a matrix state S^T, more when the
/// rule carries extra per-key columns (RLS: `Rule::state_columns(K, V)` = V + K).
template <class Rule>
index_t state_columns(index_t K, index_t V) {
  if constexpr (requires { Rule::state_columns(K, V); }) return Rule::state_columns(K, V);
  else return V;
}
template <class Rule>
const char* state_shape_name() {
  if constexpr (requires { Rule::state_shape; }) return Rule::state_shape;
  else return "[N, HV, K, V]";
}

/// Validates one call of `Rule` and returns its sizes. Rules report their extra inputs
/// through `per_token` / `per_key`.
template <class Rule, class T, class Real>
class call_checker {
 public:
  using inputs_t = typename Rule::template inputs<T>;

  /// `api` prefixes the function name in messages ("linattn::" or "linattn::cuda::").
  call_checker(form f, const inputs_t& in, const options<Real>& opt, const char* api = "linattn::")
      : form_(f), in_(in), opt_(opt) {
    fn_ = std::string(api) + form_name(f) + "<" + Rule::name + ">";
  }

  /// Checks inputs, options and the output; `state` is decode_step's in-place state.
  problem check(const tensor_view<T, 4>& out, const tensor_view<Real, 4>* state = nullptr) {
    check_qkv();
    Rule::check_inputs(in_, *this);
    check_output(out);
    check_options();
    if (state) check_decode_state(*state, out);
    else check_states(out);
    if (opt_.check_finite) scan_inputs(state);
    return p_;
  }

  // ---- hooks for Rule::check_inputs ----------------------------------------------------

  /// A per-token scalar input of shape [B, T, HV] (g, beta, delta, eta, ...).
  void per_token(const char* name, const tensor_view<const T, 3>& x, value_range range) {
    expect_shape(name, x, std::array<index_t, 3>{p_.B, p_.T, p_.HV}, "[B, T, HV]");
    extra_inputs_.push_back({name, byte_range(x)});
    scans_.push_back([this, name, x, range] { scan(name, x, range); });
  }
  /// A per-token, per-key input of shape [B, T, HV, K] (vector gates).
  void per_key(const char* name, const tensor_view<const T, 4>& x, value_range range) {
    expect_shape(name, x, std::array<index_t, 4>{p_.B, p_.T, p_.HV, p_.K}, "[B, T, HV, K]");
    extra_inputs_.push_back({name, byte_range(x)});
    scans_.push_back([this, name, x, range] { scan(name, x, range); });
  }

  /// Throws `linattn::error` with the function name and argument prefixed.
  [[noreturn]] void fail(const std::string& arg, const std::string& msg) const {
    throw error(fn_ + ": argument '" + arg + "' " + msg);
  }

 private:
  template <class V, std::size_t R>
  void expect_shape(const char* name, const V& x, const std::array<index_t, R>& want,
                    const char* symbolic) {
    if (!x.given()) fail(name, "is missing; expected a view of shape " + std::string(symbolic) + " = " + shape_string(want));
    if (x.extents() != want)
      fail(name, "has shape " + shape_string(x.extents()) + ", expected " + symbolic + " = " + shape_string(want));
    if (x.data() == nullptr && x.size() > 0) fail(name, "has null data");
  }

  void check_qkv() {
    const auto& q = in_.q;
    if (!q.given()) fail("q", "is missing; expected a view of shape [B, T, H, K]");
    for (int d = 0; d < 4; ++d)
      if (q.extent(d) < 0) fail("q", "has a negative extent: shape " + shape_string(q.extents()));
    p_.B = q.extent(0), p_.T = q.extent(1), p_.H = q.extent(2), p_.K = q.extent(3);
    if (p_.B < 1 || p_.H < 1 || p_.K < 1)
      fail("q", "has shape " + shape_string(q.extents()) + ", expected [B, T, H, K] with B, H, K >= 1");
    if (q.data() == nullptr && q.size() > 0) fail("q", "has null data");
    expect_shape("k", in_.k, q.extents(), "[B, T, H, K] (the shape of q)");
    const auto& v = in_.v;
    if (!v.given()) fail("v", "is missing; expected a view of shape [B, T, HV, V]");
    if (v.extent(0) != p_.B || v.extent(1) != p_.T || v.extent(2) < 1 || v.extent(3) < 1)
      fail("v", "has shape " + shape_string(v.extents()) + ", expected [B, T, HV, V] = [" +
                    std::to_string(p_.B) + ", " + std::to_string(p_.T) + ", HV, V] with HV, V >= 1 (B, T from q)");
    p_.HV = v.extent(2), p_.V = v.extent(3);
    if (p_.HV % p_.H != 0)
      fail("v", "has HV = " + std::to_string(p_.HV) + " value heads, expected a multiple of H = " +
                    std::to_string(p_.H) + " (the q/k heads)");
    if (v.data() == nullptr && v.size() > 0) fail("v", "has null data");
    p_.group = p_.HV / p_.H;
  }

  void check_output(const tensor_view<T, 4>& out) {
    expect_shape("out", out, std::array<index_t, 4>{p_.B, p_.T, p_.HV, p_.V}, "[B, T, HV, V]");
    if (!distinct_elements(out)) fail("out", "has strides " + shape_string(out.strides()) + " that make distinct elements share memory");
    if (overlaps(out, in_.q)) fail("out", "overlaps input 'q'");
    if (overlaps(out, in_.k)) fail("out", "overlaps input 'k'");
    if (overlaps(out, in_.v)) fail("out", "overlaps input 'v'");
    for (const auto& [name, range] : extra_inputs_)
      if (overlaps(byte_range(out), range)) fail("out", std::string("overlaps input '") + name + "'");
    out_ = out;
  }

  void check_options() {
    if (opt_.scale && !std::isfinite(*opt_.scale))
      fail("options.scale", "is " + std::to_string(*opt_.scale) + ", expected a finite number");
    p_.scale = opt_.scale ? *opt_.scale : 1.0 / std::sqrt(static_cast<double>(p_.K));
    if (form_ == form::chunkwise && (opt_.chunk_size < 1 || opt_.chunk_size > max_chunk_size))
      fail("options.chunk_size", "is " + std::to_string(opt_.chunk_size) + ", expected 1.." + std::to_string(max_chunk_size));
    p_.chunk = opt_.chunk_size;
    if (opt_.threads < 0) fail("options.threads", "is " + std::to_string(opt_.threads) + ", expected >= 0 (0 = all cores)");
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    p_.threads = opt_.threads == 0 ? hw : std::min(opt_.threads, hw);
    p_.N = p_.B;
    const auto& cu = opt_.cu_seqlens;
    if (!cu.given()) return;
    if (form_ == form::decode) fail("options.cu_seqlens", "is set, expected none: decode_step takes one token per sequence, sequences are the B axis");
    if (cu.null()) fail("options.cu_seqlens", "has null data");
    if (p_.B != 1) fail("options.cu_seqlens", "is set while q has B = " + std::to_string(p_.B) + ", expected B == 1 (packed batch)");
    if (cu.size() < 2) fail("options.cu_seqlens", "has " + std::to_string(cu.size()) + " entries, expected N + 1 >= 2 offsets");
    if (cu[0] != 0) fail("options.cu_seqlens", "starts at " + std::to_string(cu[0]) + ", expected 0");
    for (index_t i = 1; i < cu.size(); ++i)
      if (cu[i] < cu[i - 1])
        fail("options.cu_seqlens", "is not sorted: entry " + std::to_string(i) + " = " + std::to_string(cu[i]) +
                                       " < entry " + std::to_string(i - 1) + " = " + std::to_string(cu[i - 1]));
    if (cu[cu.size() - 1] != p_.T)
      fail("options.cu_seqlens", "ends at " + std::to_string(cu[cu.size() - 1]) + ", expected T = " + std::to_string(p_.T));
    p_.N = cu.size() - 1;
    p_.cu = cu;
  }

  std::array<index_t, 4> state_shape() const { return {p_.N, p_.HV, p_.K, state_columns<Rule>(p_.K, p_.V)}; }

  template <class S>
  void check_state_view(const char* name, const S& s) {
    expect_shape(name, s, state_shape(), state_shape_name<Rule>());
    if (overlaps(s, in_.q) || overlaps(s, in_.k) || overlaps(s, in_.v)) fail(name, "overlaps an input (q, k or v)");
    for (const auto& [input, range] : extra_inputs_)
      if (overlaps(byte_range(s), range)) fail(name, std::string("overlaps input '") + input + "'");
    if (overlaps(s, out_)) fail(name, "overlaps 'out'");
  }

  void check_states(const tensor_view<T, 4>&) {
    const auto& s0 = opt_.initial_state;
    const auto& s1 = opt_.final_state;
    if (s0.given()) check_state_view("options.initial_state", s0);
    if (!s1.given()) return;
    check_state_view("options.final_state", s1);
    if (!distinct_elements(s1)) fail("options.final_state", "has strides that make distinct elements share memory");
    const bool same = s0.given() && s0.data() == s1.data() && s0.strides() == s1.strides();
    if (s0.given() && !same && overlaps(s0, s1))
      fail("options.final_state", "partly overlaps options.initial_state; expected the same view (in place) or disjoint memory");
  }

  void check_decode_state(const tensor_view<Real, 4>& s, const tensor_view<T, 4>&) {
    if (opt_.initial_state.given()) fail("options.initial_state", "is set, expected none: decode_step reads and writes its 'state' argument");
    if (opt_.final_state.given()) fail("options.final_state", "is set, expected none: decode_step reads and writes its 'state' argument");
    check_state_view("state", s);
    if (!distinct_elements(s)) fail("state", "has strides that make distinct elements share memory");
  }

  template <class V>
  void scan(const char* name, const V& x, value_range range) {
    for_each_element(x, [&](const auto& val, const auto& idx) {
      const double d = static_cast<double>(val);
      if (!std::isfinite(d)) fail(name, "holds a non-finite value (" + std::to_string(d) + ") at " + shape_string(idx) + " (options.check_finite)");
      if (range == value_range::log_gate && d > 0.0)
        fail(name, "holds a positive log gate (" + std::to_string(d) + ") at " + shape_string(idx) + ", expected <= 0 (options.check_finite)");
      if (range == value_range::nonnegative && d < 0.0)
        fail(name, "holds a negative value (" + std::to_string(d) + ") at " + shape_string(idx) + ", expected >= 0 (options.check_finite)");
    });
  }

  void scan_inputs(const tensor_view<Real, 4>* state) {
    scan("q", in_.q, value_range::any);
    scan("k", in_.k, value_range::any);
    scan("v", in_.v, value_range::any);
    for (auto& s : scans_) s();
    if (state) scan("state", *state, value_range::any);
    else if (opt_.initial_state.given()) scan("options.initial_state", opt_.initial_state, value_range::any);
  }

  form form_;
  const inputs_t& in_;
  const options<Real>& opt_;
  std::string fn_;
  problem p_;
  tensor_view<T, 4> out_;
  std::vector<std::function<void()>> scans_;
  std::vector<std::pair<const char*, address_range>> extra_inputs_;  // rule inputs beyond q, k, v
};

}  // namespace linattn::detail
