// SPDX-License-Identifier: MIT
/// \file
/// Backward-pass harness: problems for every linear rule (NLMS included), calls of the two
/// backward forms on caller buffers (NaN-poisoned, contiguous or strided), and the finite
/// differences of the float64 reference that the gradients are checked against.
#pragma once

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backward_instantiations.hpp"
#include "harness.hpp"

namespace harness {

/// The reference's description of a rule (NLMS included).
template <class Rule>
constexpr rule_spec backward_spec_of() {
  rule_spec s = spec_of<Rule>();
  if constexpr (std::is_same_v<Rule, la::NLMS>) s.rule = ref::update::nlms;
  return s;
}

/// Which inputs of a rule are differentiable besides q, k, v.
template <class Rule>
constexpr bool has_gate = Rule::decay != la::decay_kind::none;
template <class Rule>
constexpr bool has_beta_input = std::is_same_v<Rule, la::Delta> || std::is_same_v<Rule, la::GatedDelta> ||
                                std::is_same_v<Rule, la::Longhorn> || std::is_same_v<Rule, la::KDA>;

/// How the step-size input is drawn.
enum class steps { usual, large /* delta rules: beta in (0, 2); Longhorn: delta up to e^3 */ };

/// A problem for the backward tests: make_problem's, with NLMS (raw keys), large steps on
/// request and raw keys for Longhorn.
template <class Rule>
ref::problem backward_problem(std::mt19937_64& rng, ref::dims d, gates gm = gates::mild, bool with_s0 = true,
                              std::vector<std::int64_t> cu = {}, steps st = steps::usual) {
  const rule_spec spec = backward_spec_of<Rule>();
  ref::problem p =
      make_problem(rng, d, rule_spec{spec.kind, spec.rule == ref::update::nlms ? ref::update::additive : spec.rule}, gm,
                   with_s0, std::move(cu));
  p.rule = spec.rule;
  std::uniform_real_distribution<double> uniform(0.05, 1.95);
  std::normal_distribution<double> normal;
  if (st == steps::large && spec.rule == ref::update::delta)
    for (auto& e : p.beta) e = uniform(rng);
  if (st == steps::large && spec.rule == ref::update::longhorn)
    for (auto& e : p.beta) e = std::exp(3.0 * normal(rng));
  return p;
}

/// All gradients of a call in float64 (row-major logical order), NaN where nothing was written.
struct gradients {
  std::vector<double> dq, dk, dv, dg, dbeta, ds0;
  bool padding_ok = true;
};

/// Incoming gradients: dL/d out and dL/d final state (empty: not given).
struct seeds {
  std::vector<double> dout, ds1;
};

inline seeds make_seeds(std::mt19937_64& rng, const ref::problem& p, bool with_ds1 = true) {
  std::normal_distribution<double> normal;
  seeds s;
  s.dout.resize(std::size_t(p.d.B) * p.d.T * p.d.HV * p.d.V);
  for (auto& e : s.dout) e = normal(rng);
  if (with_ds1) {
    s.ds1.resize(std::size_t(p.sequences()) * p.d.HV * p.d.K * p.d.V);
    for (auto& e : s.ds1) e = normal(rng);
  }
  return s;
}

enum class bform { recurrent, chunkwise };
inline const char* name(bform f) { return f == bform::recurrent ? "recurrent_backward" : "chunkwise_backward"; }

struct bconfig {
  index_t chunk = 16;
  int threads = 0;
  layout lay = layout::contiguous;
  bool want_ds0 = true;
  bool normalize_qk = false;  // options::normalize_qk
};

/// Runs one backward form of the library with scalar type T (gates, betas and their gradients
/// held as G: T, or float under 16-bit T).
template <class Rule, class T, class G = T>
gradients run_backward(bform f, const ref::problem& p, const seeds& s, const bconfig& c = {}) {
  using A = la::state_t<T>;
  const auto& d = p.d;
  const index_t N = p.sequences();
  buffer<T, 4> q({d.B, d.T, d.H, d.K}, c.lay, p.q), k({d.B, d.T, d.H, d.K}, c.lay, p.k);
  buffer<T, 4> v({d.B, d.T, d.HV, d.V}, c.lay, p.v), dout({d.B, d.T, d.HV, d.V}, c.lay, s.dout);
  buffer<G, 3> g3({d.B, d.T, d.HV}, c.lay), b3({d.B, d.T, d.HV}, c.lay);
  buffer<G, 4> g4({d.B, d.T, d.HV, d.K}, c.lay);
  if (p.kind == ref::decay::scalar) g3.set(p.g);
  if (p.kind == ref::decay::vector) g4.set(p.g);
  if (!p.beta.empty()) b3.set(p.beta);
  buffer<A, 4> s0({N, d.HV, d.K, d.V}, c.lay), ds1({N, d.HV, d.K, d.V}, c.lay), ds0({N, d.HV, d.K, d.V}, c.lay);
  if (!p.s0.empty()) s0.set(p.s0);
  if (!s.ds1.empty()) ds1.set(s.ds1);
  // Gradient buffers stay NaN until written.
  buffer<T, 4> dq({d.B, d.T, d.H, d.K}, c.lay), dk({d.B, d.T, d.H, d.K}, c.lay), dv({d.B, d.T, d.HV, d.V}, c.lay);
  buffer<G, 3> dg3({d.B, d.T, d.HV}, c.lay), db3({d.B, d.T, d.HV}, c.lay);
  buffer<G, 4> dg4({d.B, d.T, d.HV, d.K}, c.lay);

  la::backward_options<A> opt;
  opt.chunk_size = c.chunk;
  opt.threads = c.threads;
  opt.normalize_qk = c.normalize_qk;
  if (!p.s0.empty()) opt.initial_state = s0.view();
  if (!s.ds1.empty()) opt.grad_final_state = ds1.view();
  if (c.want_ds0) opt.grad_initial_state = ds0.view();
  std::vector<std::int64_t> cu = p.cu;
  if (!cu.empty()) opt.cu_seqlens = la::view(cu.data(), cu.size());

  auto in = make_inputs<Rule, T, G>(q.view(), k.view(), v.view(), g3.view(), g4.view(), b3.view());
  la::gradients_t<Rule, T> gr{};
  gr.dq = dq.view(), gr.dk = dk.view(), gr.dv = dv.view();
  if constexpr (Rule::decay == la::decay_kind::scalar) gr.dg = dg3.view();
  if constexpr (Rule::decay == la::decay_kind::vector) gr.dg = dg4.view();
  if constexpr (std::is_same_v<Rule, la::Longhorn>) gr.ddelta = db3.view();
  else if constexpr (has_beta_input<Rule>) gr.dbeta = db3.view();
  if (f == bform::recurrent) la::recurrent_backward<Rule>(in, dout.view(), gr, opt);
  else la::chunkwise_backward<Rule>(in, dout.view(), gr, opt);

  gradients r;
  r.dq = dq.get(), r.dk = dk.get(), r.dv = dv.get();
  r.padding_ok = dq.padding_untouched() && dk.padding_untouched() && dv.padding_untouched();
  if constexpr (Rule::decay == la::decay_kind::scalar) r.dg = dg3.get(), r.padding_ok &= dg3.padding_untouched();
  if constexpr (Rule::decay == la::decay_kind::vector) r.dg = dg4.get(), r.padding_ok &= dg4.padding_untouched();
  if constexpr (has_beta_input<Rule>) r.dbeta = db3.get(), r.padding_ok &= db3.padding_untouched();
  if (c.want_ds0) r.ds0 = ds0.get(), r.padding_ok &= ds0.padding_untouched();
  return r;
}

/// L = <dout, out> + <ds1, final state> of the float64 reference; `magnitude` receives the
/// sum of |terms| (the scale of L's rounding errors).
inline double loss(const ref::problem& p, const seeds& s, double* magnitude = nullptr) {
  const ref::result r = ref::run(p);
  double l = 0, m = 0;
  for (std::size_t i = 0; i < r.o.size(); ++i) l += s.dout[i] * r.o[i], m += std::abs(s.dout[i] * r.o[i]);
  for (std::size_t i = 0; i < s.ds1.size(); ++i) l += s.ds1[i] * r.s[i], m += std::abs(s.ds1[i] * r.s[i]);
  if (magnitude) *magnitude = m;
  return l;
}

/// One differentiable input of a problem: its values in p and its gradient in g.
struct input_slot {
  const char* name;
  std::vector<double> ref::problem::*values;
  std::vector<double> gradients::*grad;
};

/// The differentiable inputs of a problem (those it has).
inline std::vector<input_slot> inputs_of(const ref::problem& p) {
  std::vector<input_slot> s{{"q", &ref::problem::q, &gradients::dq},
                            {"k", &ref::problem::k, &gradients::dk},
                            {"v", &ref::problem::v, &gradients::dv}};
  if (!p.g.empty()) s.push_back({"g", &ref::problem::g, &gradients::dg});
  if (!p.beta.empty() && p.rule != ref::update::nlms) s.push_back({"beta", &ref::problem::beta, &gradients::dbeta});
  if (!p.s0.empty()) s.push_back({"s0", &ref::problem::s0, &gradients::ds0});
  return s;
}

/// A directional-derivative check: <grad, dir> against the central difference of L along
/// dir: the part of the difference beyond the central difference's own rounding noise,
/// relative to the scale sum |grad_i dir_i| (gradients of e^-60 size are only checked to be
/// that small).
struct directional {
  double analytic = 0, numeric = 0, scale = 0, noise = 0;
  double error() const {
    return std::max(0.0, std::abs(analytic - numeric) - noise) / std::max(scale, 1e-300);
  }
};

/// Central difference of L along a random direction of the inputs in `which` (all at once),
/// compared with the gradients g. Step eps relative to each input's typical size.
inline directional check_direction(const ref::problem& p, const seeds& s, const gradients& g,
                                   const std::vector<input_slot>& which, std::mt19937_64& rng, double eps = 1e-5) {
  std::normal_distribution<double> normal;
  ref::problem plus = p, minus = p;
  directional r;
  for (const input_slot& in : which) {
    const std::vector<double>& x = p.*in.values;
    const std::vector<double>& gx = g.*in.grad;
    std::vector<double>&xp = plus.*in.values, &xm = minus.*in.values;
    for (std::size_t i = 0; i < x.size(); ++i) {
      double dir = normal(rng);
      // keep beta, delta positive; where it is exactly 0 (a token that writes nothing) step
      // both ways, so that its gradient is checked too
      if (in.values == &ref::problem::beta) dir *= x[i] != 0.0 ? 0.1 * x[i] : 0.1;
      xp[i] = x[i] + eps * dir;
      xm[i] = x[i] - eps * dir;
      r.analytic += gx.at(i) * dir;
      r.scale += std::abs(gx.at(i) * dir);
    }
  }
  double magnitude = 0;
  r.numeric = (loss(plus, s, &magnitude) - loss(minus, s)) / (2 * eps);
  r.noise = 100 * 2.2e-16 * magnitude / eps;
  return r;
}

/// max|got - want| / max|want| over every gradient the problem has.
inline double max_rel_err(const gradients& got, const gradients& want, const ref::problem& p, std::string& worst) {
  double e = 0;
  for (const input_slot& in : inputs_of(p)) {
    const double ei = rel_err(got.*in.grad, want.*in.grad);
    if (!(ei <= e)) e = ei, worst = in.name;
  }
  return e;
}

/// Bitwise equality of every gradient.
inline bool identical(const gradients& a, const gradients& b) {
  auto same = [](const std::vector<double>& x, const std::vector<double>& y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0);
  };
  return same(a.dq, b.dq) && same(a.dk, b.dk) && same(a.dv, b.dv) && same(a.dg, b.dg) && same(a.dbeta, b.dbeta) &&
         same(a.ds0, b.ds0);
}

}  // namespace harness
