// SPDX-License-Identifier: MIT
/// \file
/// The beta members of a Householder rule whose step is its own input `beta` `[B, T, HV]`
/// (Delta, GatedDelta, KDA): beta_t = beta(b, t, hv) whatever the key's norm, so d beta /
/// d beta = 1 and d beta / d ||k||^2 = 0, and dL/d beta goes to the gradients' `dbeta`. Such a
/// rule derives from input_beta and declares the `beta` input (and the `dbeta` gradient) itself.
#pragma once

#include "../core/backward.hpp"
#include "../core/config.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

struct input_beta {
  static constexpr bool beta_is_input = true;  // beta is in.beta as stored (the CUDA backward loads it ahead)
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

}  // namespace linattn
