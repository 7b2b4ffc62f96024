// SPDX-License-Identifier: MIT
/// \file
/// The members of a rule whose coefficients are its own inputs, as fla names them; such a rule
/// derives from the base and declares the input (and its gradient) itself:
///   input_beta      the step `beta` `[B, T, HV]` of a Householder rule (Delta, GatedDelta, KDA):
///                   beta_t = beta(b, t, hv) whatever the key's norm, so d beta / d beta = 1,
///                   d beta / d ||k||^2 = 0, and dL/d beta goes to the gradients' `dbeta`;
///   input_gate      the log gate `g` `[B, T, HV]` (ScalarDecay, GatedDelta, GatedDeltaProduct);
///   input_key_gate  the per-key log gate `g` `[B, T, HV, K]` (VectorDecay, KDA, RWKV7).
#pragma once

#include "../core/backward.hpp"
#include "../core/config.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/family.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

struct input_beta {
  /// Step size of token t (the key's squared norm is unused).
  template <class T, class A, template <class> class Inputs>
  LINATTN_HOST_DEVICE static A beta(const Inputs<T>& in, index_t b, index_t t, index_t hv, A /*key_sqnorm*/) {
    return static_cast<A>(in.beta(b, t, hv));
  }
  /// d beta / d beta = 1; beta does not depend on the key.
  template <class T, class A, template <class> class Inputs>
  LINATTN_HOST_DEVICE static beta_partials<A> beta_derivatives(const Inputs<T>&, index_t, index_t, index_t, A) {
    return {A(1), A(0)};
  }
  /// Where dL/d beta goes.
  template <class T, template <class> class Gradients>
  static coefficient_gradient_view<T, 3> beta_gradient(const Gradients<T>& g) {
    return g.dbeta;
  }
};

struct input_gate {
  /// Log decay of token t of batch row b for value head hv.
  template <class T, template <class> class Inputs>
  LINATTN_HOST_DEVICE static state_t<T> log_gate(const Inputs<T>& in, index_t b, index_t t, index_t hv) {
    return in.g(b, t, hv);
  }
};

struct input_key_gate {
  /// Log decay of key dimension d at token t of batch row b for value head hv.
  template <class T, template <class> class Inputs>
  LINATTN_HOST_DEVICE static state_t<T> log_gate(const Inputs<T>& in, index_t b, index_t t, index_t hv, index_t d) {
    return in.g(b, t, hv, d);
  }
};

}  // namespace linattn
