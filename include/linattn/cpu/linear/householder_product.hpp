// SPDX-License-Identifier: MIT
/// \file
/// The Householder-product family (DeltaProduct, docs/math.md#deltaproduct) on the CPU: token t's
/// n_h steps become sub-steps s = t n_h + j (j = 0..n_h-1) of one interleaved sequence of T n_h
/// sub-steps, run by the Householder family's workers as a rule of that family:
///
///   sub-step s   key k_tj, value v_tj, beta_tj;  log gate g_t at j = 0, 0 at the others;
///                query q_t at j = n_h - 1, zero at the others; output of token t read there
///
/// so the product of a token's Householder factors, and its one gate, are exactly the
/// sub-steps' transitions. The rows are read through views of the caller's tensors
/// (cpu/io/substep_io.hpp): no copy of the inputs. Chunks (options::chunk_size) count
/// sub-steps, so a chunk may end inside a token.
#pragma once

#include "../../core/dispatch.hpp"
#include "../../core/family.hpp"
#include "../../core/options.hpp"
#include "../io/substep_io.hpp"
#include "algorithms.hpp"

namespace linattn::cpu {

/// The Householder-family rule a product rule runs as on its sub-step sequence.
template <class Product>
struct product_substeps {
  static constexpr const char* name = Product::name;
  using family = householder_family;
  static constexpr decay_kind decay = Product::decay;

  template <class T>
  struct inputs {
    last_substep_rows<T> q;  // [B, T, H, K]: q_t at the last sub-step of token t
    substep_rows<T> k;       // [B, T, n_h, H, K]
    substep_rows<T> v;       // [B, T, n_h, HV, V]
    const typename Product::template inputs<T>* product = nullptr;  // its gates and betas
    index_t steps = 1;       // n_h
  };

  /// Token t's gate at its first sub-step, none at the others.
  template <class T>
  static state_t<T> log_gate(const inputs<T>& in, index_t b, index_t s, index_t hv) {
    return s % in.steps == 0 ? static_cast<state_t<T>>(Product::log_gate(*in.product, b, s / in.steps, hv)) : state_t<T>(0);
  }
  template <class T, class A>
  static A beta(const inputs<T>& in, index_t b, index_t s, index_t hv, A key_sqnorm) {
    return Product::beta(*in.product, b, s / in.steps, s % in.steps, hv, key_sqnorm);
  }
};

/// The sub-step inputs over a product rule's inputs (views only).
template <class Product, class T>
typename product_substeps<Product>::template inputs<T> substep_inputs(const typename Product::template inputs<T>& in,
                                                                       index_t steps) {
  return {.q = {in.q, steps}, .k = {in.k}, .v = {in.v}, .product = &in, .steps = steps};
}

/// The call's sizes on the sub-step sequence: T n_h sub-steps, sequence offsets times n_h.
inline detail::problem substep_problem(const detail::problem& p) {
  detail::problem s = p;
  s.T = p.T * p.steps;
  if (p.cu.given()) s.cu = p.cu.times(p.steps);
  s.steps = 1;
  return s;
}

/// Runs form F of the Householder family for the product rule on its sub-step sequence
/// (`state`: decode_step's state, read and written in place).
template <detail::form F, class Product, class T>
void run_substeps(const typename Product::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const detail::problem& p, const tensor_view<state_t<T>, 4>& state = {}) {
  const last_substep_output<T> s_out{out, p.steps};  // [B, T, HV, V]: the last sub-step of each token
  linear_form<F, product_substeps<Product>, T>(substep_inputs<Product, T>(in, p.steps), s_out, opt, substep_problem(p), state);
}

}  // namespace linattn::cpu

namespace linattn::detail {

template <form F>
  requires(forward_form(F))
struct algorithm<householder_product_family, F> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p, const tensor_view<state_t<T>, 4>& state = {}) {
    cpu::run_substeps<F, Rule, T>(in, out, opt, p, state);
  }
};

}  // namespace linattn::detail
