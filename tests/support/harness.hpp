// SPDX-License-Identifier: MIT
/// \file
/// Test harness: random problems, caller buffers in several layouts (poisoned with NaN), calls
/// of every library form, and the relative-error metric against the float64 reference.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <linattn/linattn.hpp>
#include "catch.hpp"
#include "instantiations.hpp"

#include "reference.hpp"

namespace harness {

namespace la = linattn;
using la::index_t;

inline constexpr double poison = std::numeric_limits<double>::quiet_NaN();

/// What the reference needs to know about a rule.
struct rule_spec {
  ref::decay kind = ref::decay::none;
  ref::update rule = ref::update::additive;
};

template <class Rule>
constexpr rule_spec spec_of() {
  rule_spec s;
  if constexpr (Rule::decay == la::decay_kind::scalar) s.kind = ref::decay::scalar;
  if constexpr (Rule::decay == la::decay_kind::vector) s.kind = ref::decay::vector;
  if constexpr (std::is_same_v<typename Rule::family, la::householder_family>)
    s.rule = std::is_same_v<Rule, la::Longhorn> ? ref::update::longhorn : ref::update::delta;
  if constexpr (std::is_same_v<Rule, la::LonghornDiagonal>) s = {ref::decay::none, ref::update::longhorn_diagonal};
  return s;
}

/// Tolerance on max|got - ref| / max|ref| (docs/design.md#testing).
template <class T>
constexpr double tolerance() {
  return std::is_same_v<T, double> ? 1e-10 : 1e-4;
}

/// max|got - want| / max|want|; infinite when got holds a NaN where want does not.
inline double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(got.at(i) - want[i]);
    if (!(d <= diff)) diff = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
    scale = std::max(scale, std::abs(want[i]));
  }
  return diff / std::max(scale, 1e-300);
}

/// How generated log gates look (docs/math.md#equivalences).
enum class gates { mild, strong, weak, zero };

/// Scales every key k_t to unit L2 norm.
inline void normalise_keys(ref::problem& p) {
  const std::size_t K = std::size_t(p.d.K);
  for (std::size_t t = 0; t < p.k.size(); t += K) {
    double n2 = 0;
    for (std::size_t i = 0; i < K; ++i) n2 += p.k[t + i] * p.k[t + i];
    for (std::size_t i = 0; i < K; ++i) p.k[t + i] /= std::sqrt(n2);
  }
}

/// Multiplies every row of `width` elements by its own factor 10^u, u uniform in [lo, hi]: q
/// and k rows of very different lengths, for options::normalize_qk.
inline void scale_rows(std::vector<double>& x, int width, std::mt19937_64& rng, double lo = -3.0, double hi = 2.0) {
  std::uniform_real_distribution<double> exponent(lo, hi);
  for (std::size_t r = 0; r < x.size(); r += std::size_t(width)) {
    const double f = std::pow(10.0, exponent(rng));
    for (int i = 0; i < width; ++i) x[r + std::size_t(i)] *= f;
  }
}

inline double logsigmoid(double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }

/// A random problem: normal q, k, v; random non-zero S0 when `with_s0`; gates per `gm`.
/// Delta rules get L2-normalised keys and beta = sigmoid(N(0,1)); Longhorn gets raw keys and
/// delta = exp(N(0,1)) (it needs no normalisation).
inline ref::problem make_problem(std::mt19937_64& rng, ref::dims d, rule_spec spec, gates gm = gates::mild,
                                 bool with_s0 = true, std::vector<std::int64_t> cu = {}) {
  std::normal_distribution<double> normal;
  ref::problem p;
  p.d = d;
  p.kind = spec.kind;
  p.rule = spec.rule;
  const ref::decay kind = spec.kind;
  p.scale = 1.0 / std::sqrt(double(d.K));
  p.cu = std::move(cu);
  const int N = p.sequences();
  auto fill = [&](std::vector<double>& x, std::size_t n) {
    x.resize(n);
    for (auto& e : x) e = normal(rng);
  };
  fill(p.q, std::size_t(d.B) * d.T * d.H * d.K);
  fill(p.k, p.q.size());
  fill(p.v, std::size_t(d.B) * d.T * d.HV * d.V);
  if (with_s0) fill(p.s0, std::size_t(N) * d.HV * d.K * d.V);
  const std::size_t ng = std::size_t(d.B) * d.T * d.HV * (kind == ref::decay::vector ? d.K : 1);
  if (kind != ref::decay::none) {
    p.g.resize(ng);
    for (auto& e : p.g) {
      switch (gm) {
        case gates::mild: e = logsigmoid(normal(rng) + 2.0); break;
        case gates::strong: e = -60.0; break;
        case gates::weak: e = -1e-6; break;
        case gates::zero: e = 0.0; break;
      }
    }
  }
  if (spec.rule == ref::update::delta) {
    normalise_keys(p);
    p.beta.resize(std::size_t(d.B) * d.T * d.HV);
    for (auto& e : p.beta) e = 1.0 / (1.0 + std::exp(-normal(rng)));
  }
  if (spec.rule == ref::update::longhorn || spec.rule == ref::update::longhorn_diagonal) {
    p.beta.resize(std::size_t(d.B) * d.T * d.HV);
    for (auto& e : p.beta) e = std::exp(normal(rng));
  }
  return p;
}

/// Additive-rule problem with the given decay.
inline ref::problem make_problem(std::mt19937_64& rng, ref::dims d, ref::decay kind, gates gm = gates::mild,
                                 bool with_s0 = true, std::vector<std::int64_t> cu = {}) {
  return make_problem(rng, d, rule_spec{kind, ref::update::additive}, gm, with_s0, std::move(cu));
}

/// Physical layouts of caller buffers: row-major, or permuted (heads before tokens) with 3
/// padding elements after every innermost row. Padding stays NaN so that a read of it
/// poisons the result and a write to it is detected.
enum class layout { contiguous, strided };

template <class E, int R>
class buffer {
 public:
  buffer(const std::array<index_t, R>& extents, layout lay) : extents_(extents) {
    std::array<int, R> order{};  // physical position -> logical dim
    for (int i = 0; i < R; ++i) order[i] = i;
    const index_t pad = lay == layout::strided ? 3 : 0;
    if (lay == layout::strided && R >= 3) std::swap(order[1], order[2]);
    std::array<index_t, R> strides{};
    index_t acc = 1;
    for (int i = R - 1; i >= 0; --i) {
      strides[order[i]] = acc;
      acc *= extents[order[i]] + (i == R - 1 ? pad : 0);
    }
    mem_.assign(static_cast<std::size_t>(std::max<index_t>(acc, 1)), static_cast<E>(poison));
    view_ = la::tensor_view<E, R>(mem_.data(), extents, strides);
  }
  buffer(const std::array<index_t, R>& extents, layout lay, const std::vector<double>& values) : buffer(extents, lay) {
    set(values);
  }

  const la::tensor_view<E, R>& view() const { return view_; }
  E* data() { return mem_.data(); }

  /// Writes row-major logical values through the view.
  void set(const std::vector<double>& values) {
    std::size_t i = 0;
    for_each([&](E& e) { e = static_cast<E>(values.at(i++)); });
  }
  /// Reads the logical elements in row-major order.
  std::vector<double> get() const {
    std::vector<double> out;
    const_cast<buffer*>(this)->for_each([&](E& e) { out.push_back(static_cast<double>(e)); });
    return out;
  }
  /// True when every element outside the view is still NaN.
  bool padding_untouched() const {
    std::vector<char> inside(mem_.size(), 0);
    const_cast<buffer*>(this)->for_each([&](E& e) { inside[std::size_t(&e - mem_.data())] = 1; });
    for (std::size_t i = 0; i < mem_.size(); ++i)
      if (!inside[i] && !std::isnan(static_cast<double>(mem_[i]))) return false;
    return true;
  }

 private:
  template <class F>
  void for_each(F&& f) {
    index_t n = 1;
    for (auto e : extents_) n *= e;
    std::array<index_t, R> idx{};
    for (index_t c = 0; c < n; ++c) {
      index_t rem = c;
      for (int d = R - 1; d >= 0; --d) {
        idx[d] = rem % extents_[d];
        rem /= extents_[d];
      }
      index_t off = 0;
      for (int d = 0; d < R; ++d) off += idx[d] * view_.stride(d);
      f(mem_[std::size_t(off)]);
    }
  }

  std::array<index_t, R> extents_;
  std::vector<E> mem_;
  la::tensor_view<E, R> view_;
};

enum class form { recurrent, parallel, chunkwise, decode };
inline const char* name(form f) {
  switch (f) {
    case form::recurrent: return "recurrent";
    case form::parallel: return "parallel";
    case form::chunkwise: return "chunkwise";
    case form::decode: return "decode";
  }
  return "?";
}
inline constexpr std::array<form, 4> all_forms{form::recurrent, form::parallel, form::chunkwise, form::decode};

/// Runs form f of Rule over T tokens given as slices: in_at(t0, len) and out_at(t0, len) are the
/// inputs and the output of tokens [t0, t0 + len) of every batch row. decode: T steps of one
/// token on `state`, in place (the caller fills it with the start state; opt's scale, threads
/// and state_indices apply);
/// the other forms: one call over all T tokens with opt.
template <class Rule, class InAt, class OutAt, class A>
void run_slices(form f, index_t T, InAt&& in_at, OutAt&& out_at, la::tensor_view<A, 4> state, const la::options<A>& opt) {
  if (f == form::decode) {
    la::options<A> step;
    step.scale = opt.scale;
    step.threads = opt.threads;
    step.state_indices = opt.state_indices;
    step.normalize_qk = opt.normalize_qk;
    for (index_t t = 0; t < T; ++t) la::decode_step<Rule>(in_at(t, 1), out_at(t, 1), state, step);
    return;
  }
  const auto in = in_at(0, T);
  const auto out = out_at(0, T);
  if (f == form::recurrent) la::recurrent_forward<Rule>(in, out, opt);
  if (f == form::chunkwise) la::chunkwise_forward<Rule>(in, out, opt);
  if (f == form::parallel) la::parallel_forward<Rule>(in, out, opt);
}

struct config {
  index_t chunk = 64;
  int threads = 0;
  layout lay = layout::contiguous;
  bool use_s0 = true;      // pass p.s0 as initial state (when p has one)
  bool want_state = true;  // ask for the final state
  bool explicit_scale = false;
  bool normalize_qk = false;  // options::normalize_qk (the reference normalises when p.normalize_qk)
};

/// The library's inputs struct of `Rule` over the given views (g3: scalar gates, g4: vector
/// gates, b3: beta or Longhorn's delta; their element type G is T or, for 16-bit T, float).
template <class Rule, class T, class G = T>
typename Rule::template inputs<T> make_inputs(la::tensor_view<const T, 4> q, la::tensor_view<const T, 4> k,
                                              la::tensor_view<const T, 4> v,
                                              std::type_identity_t<la::tensor_view<const G, 3>> g3,
                                              std::type_identity_t<la::tensor_view<const G, 4>> g4,
                                              std::type_identity_t<la::tensor_view<const G, 3>> b3) {
  if constexpr (std::is_same_v<Rule, la::Hebbian>) return {.q = q, .k = k, .v = v};
  else if constexpr (std::is_same_v<Rule, la::ScalarDecay>) return {.q = q, .k = k, .v = v, .g = g3};
  else if constexpr (std::is_same_v<Rule, la::VectorDecay>) return {.q = q, .k = k, .v = v, .g = g4};
  else if constexpr (std::is_same_v<Rule, la::Delta>) return {.q = q, .k = k, .v = v, .beta = b3};
  else if constexpr (std::is_same_v<Rule, la::GatedDelta>) return {.q = q, .k = k, .v = v, .g = g3, .beta = b3};
  else if constexpr (std::is_same_v<Rule, la::KDA>) return {.q = q, .k = k, .v = v, .g = g4, .beta = b3};
  else if constexpr (std::is_same_v<Rule, la::Longhorn>) return {.q = q, .k = k, .v = v, .delta = b3};
  else if constexpr (std::is_same_v<Rule, la::LonghornDiagonal>) return {.q = q, .k = k, .v = v, .delta = b3};
  else if constexpr (std::is_same_v<Rule, la::NLMS>) return {.q = q, .k = k, .v = v};
  else static_assert(la::detail::always_false<Rule>, "harness: add the rule to make_inputs");
}

/// What a call produced: outputs and final state in float64 (NaN where nothing was written),
/// and whether memory outside the output views stayed untouched.
struct outcome {
  ref::result r;
  bool padding_ok = true;
};

/// Runs one form of the library on p with scalar type T (gates and betas held as G).
/// `decode` runs T successive single-token decode steps on slices of the same buffers.
template <class Rule, class T, class G = T>
outcome run(form f, const ref::problem& p, const config& c = {}) {
  using A = la::state_t<T>;
  const auto& d = p.d;
  const index_t N = p.sequences();
  buffer<T, 4> q({d.B, d.T, d.H, d.K}, c.lay, p.q), k({d.B, d.T, d.H, d.K}, c.lay, p.k);
  buffer<T, 4> v({d.B, d.T, d.HV, d.V}, c.lay, p.v), out({d.B, d.T, d.HV, d.V}, c.lay);
  buffer<G, 3> g3({d.B, d.T, d.HV}, c.lay), b3({d.B, d.T, d.HV}, c.lay);
  buffer<G, 4> g4({d.B, d.T, d.HV, d.K}, c.lay);
  if (p.kind == ref::decay::scalar) g3.set(p.g);
  if (p.kind == ref::decay::vector) g4.set(p.g);
  if (!p.beta.empty()) b3.set(p.beta);
  buffer<A, 4> s0({N, d.HV, d.K, d.V}, c.lay), s1({N, d.HV, d.K, d.V}, c.lay);
  const bool has_s0 = c.use_s0 && !p.s0.empty();
  if (has_s0) s0.set(p.s0);

  auto slice = [](const auto& view, index_t t0, index_t len) {
    auto e = view.extents();
    e[1] = len;
    return std::remove_cvref_t<decltype(view)>(view.data() + t0 * view.stride(1), e, view.strides());
  };

  la::options<A> opt;
  opt.chunk_size = c.chunk;
  opt.threads = c.threads;
  if (c.explicit_scale) opt.scale = p.scale;
  opt.normalize_qk = c.normalize_qk;
  std::vector<std::int64_t> cu = p.cu;
  if (!cu.empty()) opt.cu_seqlens = la::view(cu.data(), cu.size());

  outcome res;
  if (f == form::decode) {
    s1.set(has_s0 ? p.s0 : std::vector<double>(std::size_t(N) * d.HV * d.K * d.V, 0.0));
    for (index_t t = 0; t < d.T; ++t) {
      auto in = make_inputs<Rule, T, G>(slice(q.view(), t, 1), slice(k.view(), t, 1), slice(v.view(), t, 1),
                                        slice(g3.view(), t, 1), slice(g4.view(), t, 1), slice(b3.view(), t, 1));
      la::decode_step<Rule>(in, slice(out.view(), t, 1), s1.view(), opt);
    }
  } else {
    auto in = make_inputs<Rule, T, G>(q.view(), k.view(), v.view(), g3.view(), g4.view(), b3.view());
    if (has_s0) opt.initial_state = s0.view();
    if (c.want_state) opt.final_state = s1.view();
    switch (f) {
      case form::recurrent: la::recurrent_forward<Rule>(in, out.view(), opt); break;
      case form::parallel: la::parallel_forward<Rule>(in, out.view(), opt); break;
      case form::chunkwise: la::chunkwise_forward<Rule>(in, out.view(), opt); break;
      case form::decode: break;
    }
  }
  res.r.o = out.get();
  res.r.s = s1.get();
  res.padding_ok = out.padding_untouched() && s1.padding_untouched();
  return res;
}

/// Rule x scalar-type pairs for TEMPLATE_LIST_TEST_CASE.
template <class R, class T>
struct rule_case {
  using rule = R;
  using scalar = T;
};

}  // namespace harness

namespace harness {

/// Tokens [t0, t1) of every batch row of p, starting from state `s0` (empty = zero).
inline ref::problem slice_time(const ref::problem& p, int t0, int t1, std::vector<double> s0) {
  ref::problem s = p;
  s.d.T = t1 - t0;
  s.s0 = std::move(s0);
  const auto& d = p.d;
  auto cut = [&](const std::vector<double>& x, int per_token) {
    std::vector<double> y;
    for (int b = 0; b < d.B; ++b)
      y.insert(y.end(), x.begin() + (std::size_t(b) * d.T + t0) * per_token,
               x.begin() + (std::size_t(b) * d.T + t1) * per_token);
    return y;
  };
  s.q = cut(p.q, d.H * d.K);
  s.k = cut(p.k, d.H * d.K);
  s.v = cut(p.v, d.HV * d.V);
  if (!p.beta.empty()) s.beta = cut(p.beta, d.HV);
  if (!p.g.empty()) s.g = cut(p.g, d.HV * (p.kind == ref::decay::vector ? d.K : 1));
  return s;
}

/// Sequence n of p alone (B = 1, no packing): its first `len` tokens, from its initial state
/// `s0` (`[HV, K, V]`, empty = zero).
inline ref::problem prefix_of(const ref::problem& p, int n, int len, std::vector<double> s0) {
  const auto& d = p.d;
  const int b = p.cu.empty() ? n : 0, t0 = p.cu.empty() ? 0 : int(p.cu[std::size_t(n)]);
  ref::problem s = p;
  s.d.B = 1, s.d.T = len;
  s.cu.clear();
  s.s0 = std::move(s0);
  auto cut = [&](const std::vector<double>& x, int per_token) {
    if (x.empty()) return x;
    const auto at = [&](int t) { return x.begin() + std::ptrdiff_t((std::size_t(b) * d.T + std::size_t(t)) * per_token); };
    return std::vector<double>(at(t0), at(t0 + len));
  };
  s.q = cut(p.q, d.H * d.K);
  s.k = cut(p.k, d.H * d.K);
  s.v = cut(p.v, d.HV * d.V);
  s.beta = cut(p.beta, d.HV);
  s.g = cut(p.g, d.HV * (p.kind == ref::decay::vector ? d.K : 1));
  return s;
}

/// Rows [t0, t1) of every batch row of a [B, T, HV, V] output.
inline std::vector<double> rows(const std::vector<double>& o, const ref::dims& d, int t0, int t1) {
  std::vector<double> y;
  const std::size_t w = std::size_t(d.HV) * d.V;
  for (int b = 0; b < d.B; ++b)
    y.insert(y.end(), o.begin() + (std::size_t(b) * d.T + t0) * w, o.begin() + (std::size_t(b) * d.T + t1) * w);
  return y;
}

/// A run matches the reference: outputs (and the final state), every write inside the views.
template <class T>
void expect_matches(const outcome& got, const ref::result& want, bool check_state = true) {
  CHECK(rel_err(got.r.o, want.o) < tolerance<T>());
  if (check_state) CHECK(rel_err(got.r.s, want.s) < tolerance<T>());
  CHECK(got.padding_ok);
}

/// T4, state carry: `part(t0, t1, s0)` runs tokens [t0, t1) from state s0 and returns its
/// outcome; tokens [0, h) from the problem's S0, then [h, T) from the state that returned,
/// must give the one-call reference `want`.
template <class T, class Part>
void check_state_carry(const ref::result& want, const ref::dims& d, const std::vector<double>& s0, int h, Part&& part) {
  const outcome first = part(0, h, s0);
  const outcome second = part(h, d.T, first.r.s);
  CHECK(rel_err(first.r.o, rows(want.o, d, 0, h)) < tolerance<T>());
  CHECK(rel_err(second.r.o, rows(want.o, d, h, d.T)) < tolerance<T>());
  CHECK(rel_err(second.r.s, want.s) < tolerance<T>());
}

}  // namespace harness
