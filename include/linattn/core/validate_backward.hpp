// SPDX-License-Identifier: MIT
/// \file
/// Validation of a backward call, once at the entry point: the forward call's checks
/// (call_checker::check_backward: inputs, options, initial state; `grad_out` `[B, T, HV, V]`
/// as an input in place of out) plus the gradient views. Every gradient view of the rule's
/// aggregate is required and must have its input's shape; options::grad_final_state is an
/// optional input and options::grad_initial_state an optional output, both `[N, HV, K, V]`.
/// Gradients are outputs: they must hold distinct elements and overlap no input and no other
/// output. Everything is checked before anything is written.
#pragma once

#include <array>
#include <string>

#include "backward.hpp"
#include "validate.hpp"

namespace linattn::detail {

/// What a rule's `check_gradients(g, c)` hook gets: shape checks of its extra gradient views
/// against the validated sizes, which registers them as outputs.
template <class Checker>
class gradient_checker {
 public:
  explicit gradient_checker(Checker& c) : c_(c) {}

  /// A gradient of a per-token input, `[B, T, HV]` (dg of a scalar gate, dbeta, ddelta).
  template <class X>
  void per_token(const char* name, const X& x) {
    const problem& p = c_.sizes();
    output(name, x, std::array<index_t, 3>{p.B, p.T, p.HV}, "[B, T, HV]");
  }
  /// A gradient of a per-key input, `[B, T, HV, K]` (dg of a vector gate).
  template <class X>
  void per_key(const char* name, const X& x) {
    const problem& p = c_.sizes();
    output(name, x, std::array<index_t, 4>{p.B, p.T, p.HV, p.K}, "[B, T, HV, K]");
  }
  /// A required gradient view of the given shape, registered as an output.
  template <class X, std::size_t R>
  void output(const char* name, const X& x, const std::array<index_t, R>& want, const char* symbolic) {
    c_.expect(name, x, want, symbolic);
    c_.extra_output(name, x, X{}, "");
  }
  const problem& sizes() const { return c_.sizes(); }
  [[noreturn]] void fail(const std::string& arg, const std::string& msg) const { c_.fail(arg, msg); }

 private:
  Checker& c_;
};

/// Whether a rule registers extra gradient views (Rule::check_gradients(grads, checker)).
template <class Rule, class Grads, class Checker>
concept checks_gradients = requires(const Grads& g, Checker& c) { Rule::check_gradients(g, c); };

/// Rule::check_gradients(g, c) where the rule has it.
template <class Rule, class Grads, class Checker>
void check_rule_gradients(const Grads& g, Checker& c) {
  if constexpr (checks_gradients<Rule, Grads, Checker>) Rule::check_gradients(g, c);
}

/// Validates a backward call of `Rule` (form f) and returns its sizes. `setup(checker)` runs
/// first (a backend registers where the caller's offsets live, for the overlap checks).
template <class Rule, class T, class Real, class Setup = void (*)(call_checker<Rule, T, Real>&)>
problem validate_backward(form f, const typename Rule::template inputs<T>& in, const tensor_view<const T, 4>& grad_out,
                          const gradients_t<Rule, T>& grads, const backward_options<Real>& opt,
                          const char* api = "linattn::", Setup&& setup = [](call_checker<Rule, T, Real>&) {}) {
  call_checker<Rule, T, Real> checker(f, in, opt, api);
  setup(checker);
  return checker.check_backward(grad_out, [&](auto& c) {
    const problem& p = c.sizes();
    gradient_checker g(c);
    g.output("dq", grads.dq, std::array<index_t, 4>{p.B, p.T, p.H, p.K}, "[B, T, H, K] (the shape of q)");
    g.output("dk", grads.dk, std::array<index_t, 4>{p.B, p.T, p.H, p.K}, "[B, T, H, K] (the shape of k)");
    g.output("dv", grads.dv, std::array<index_t, 4>{p.B, p.T, p.HV, p.V}, "[B, T, HV, V] (the shape of v)");
    check_rule_gradients<Rule>(grads, g);
    const std::array<index_t, 4> state{p.N, p.HV, p.K, p.V};
    c.expect("options.grad_final_state", opt.grad_final_state, state, "[N, HV, K, V]", false);
    c.extra_input("options.grad_final_state", opt.grad_final_state);
    c.expect("options.grad_initial_state", opt.grad_initial_state, state, "[N, HV, K, V]", false);
    c.extra_output("options.grad_initial_state", opt.grad_initial_state, tensor_view<const Real, 4>{}, "");
  });
}

}  // namespace linattn::detail
