// SPDX-License-Identifier: MIT
/// \file
/// The recurrent backward of the linear rules (docs/backward.md): the token recurrence of
/// token_worker.hpp differentiated step by step, in reverse. With H = S^T ([K, V]) and dH the
/// gradient of the loss with respect to the state after token t:
///
///   forward   H' = decay_t(H_{t-1});  u = v_t (additive) or beta_t (v_t - H'^T k_t);
///             H_t = H' + k_t u^T;      o_t = H_t^T q~_t          (q~ = scale q)
///   backward  dq~ = H_t do_t;   dH += q~ do_t^T                  (dH: gradient of H_t)
///             du = dH^T k_t;    dk = dH u
///             additive:     dv = du
///             Householder:  dv = beta du;  dbeta = du . (v - H'^T k);
///                           dk -= beta H' du;  dH -= beta k du^T  (dH: now that of H');
///                           dk += 2 dbeta (d beta / d ||k||^2) k   (Longhorn, NLMS)
///             decay:        dg = <dH, H'> (per key row for a vector gate);
///                           dH <- decay_t(dH)                    (gradient of H_{t-1})
///
/// The backward needs H_{t-1} and H_t at every token, in reverse order. The forward states
/// are checkpointed every `chunk` tokens in a first pass; each chunk is then recomputed
/// from its checkpoint (chunk + 1 states) and walked backwards. Memory per thread slot:
/// ceil(L / chunk) + chunk + 1 states of K x V; the forward recurrence runs twice.
#pragma once

#include <cmath>
#include <type_traits>
#include <vector>

#include "../../../core/backward.hpp"
#include "../../../core/family.hpp"
#include "../../../core/problem.hpp"
#include "../../../core/tensor_view.hpp"
#include "../../io/token_io.hpp"
#include "../../linalg/eigen_types.hpp"
#include "chunk_passes.hpp"
#include "gradient_io.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class token_backward_worker {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  static constexpr bool corrects = std::is_same_v<typename Rule::family, householder_family>;
  static constexpr decay_kind decay = Rule::decay;

  token_backward_worker(index_t chunk, index_t K, index_t V)
      : chunk_(chunk), states_(static_cast<std::size_t>(chunk + 1), mat<A>(K, V)), dH_(K, V), q_(K), k_(K), v_(V),
        r_(V), do_(V), du_(V), dq_(K), dk_(K), kd_(K), hd_(K), f_(K), dgv_(K) {}

  template <class Grads>
  void run(const inputs_t& in, const tensor_view<const T, 4>& dout, const Grads& gr, const backward_options<A>& opt,
           const detail::problem& p, index_t seq, index_t hq, index_t hv, bool add) {
    const index_t b = p.batch(seq), t0 = p.start(seq), len = p.length(seq);
    const A scale = static_cast<A>(p.scale);
    chunk_passes<false>(
        opt, seq, hv, len, chunk_, checkpoints_, states_[0], dH_,
        [&](mat<A>& H, index_t c0, index_t n) {
          for (index_t j = 0; j < n; ++j) step(in, b, t0 + c0 + j, hq, hv, H);
        },
        [&](const mat<A>& H0, index_t c0, index_t n) {  // recomputed from its checkpoint, walked backwards
          states_[0] = H0;
          for (index_t j = 0; j < n; ++j) {
            states_[std::size_t(j + 1)] = states_[std::size_t(j)];
            step(in, b, t0 + c0 + j, hq, hv, states_[std::size_t(j + 1)]);
          }
          for (index_t j = n - 1; j >= 0; --j)
            back(in, dout, gr, b, t0 + c0 + j, hq, hv, scale, add, states_[std::size_t(j)], states_[std::size_t(j + 1)]);
        });
  }

 private:
  /// Decay factors of token t: f_ (vector) or the returned scalar.
  A gate(const inputs_t& in, index_t b, index_t t, index_t hv) {
    if constexpr (decay == decay_kind::scalar) {
      return std::exp(static_cast<A>(Rule::log_gate(in, b, t, hv)));
    } else if constexpr (decay == decay_kind::vector) {
      for (index_t d = 0; d < f_.size(); ++d) f_(d) = std::exp(static_cast<A>(Rule::log_gate(in, b, t, hv, d)));
    }
    return A(1);
  }

  /// H <- the state after token t (token_worker's recurrence).
  void step(const inputs_t& in, index_t b, index_t t, index_t hq, index_t hv, mat<A>& H) {
    load_rows(in.k, b, t, hq, 1, k_, A(1));
    load_rows(in.v, b, t, hv, 1, r_, A(1));
    [[maybe_unused]] const A gam = gate(in, b, t, hv);
    if constexpr (decay == decay_kind::scalar) H *= gam;
    if constexpr (decay == decay_kind::vector) H = f_.asDiagonal() * H;
    if constexpr (corrects) {
      r_.noalias() -= k_ * H;
      r_ *= Rule::beta(in, b, t, hv, k_.squaredNorm());
    }
    H.noalias() += k_.transpose() * r_;
  }

  /// The backward of token t: Hp = H_{t-1}, Ht = H_t; dH_ holds the gradient of H_t and
  /// leaves with that of H_{t-1}.
  template <class Grads>
  void back(const inputs_t& in, const tensor_view<const T, 4>& dout, const Grads& gr, index_t b, index_t t,
            index_t hq, index_t hv, A scale, bool add, const mat<A>& Hp, const mat<A>& Ht) {
    load_qkv_rows(in, b, t, 1, hq, hv, scale, q_, k_, v_);
    load_rows(dout, b, t, hv, 1, do_, A(1));
    [[maybe_unused]] const A gam = gate(in, b, t, hv);
    dq_.noalias() = do_ * Ht.transpose();
    dH_.noalias() += q_.transpose() * do_;
    du_.noalias() = k_ * dH_;  // dH^T k
    if constexpr (corrects) {
      const A sq = k_.squaredNorm(), beta = Rule::beta(in, b, t, hv, sq);
      // r = v - H'^T k with H' = decay_t(H_{t-1}) = diag(f) H_{t-1} (f = gam 1 for a scalar
      // gate); u = beta r. kd = f ⊙ k, so H'^T k = H_{t-1}^T kd and H' du = f ⊙ (H_{t-1} du).
      if constexpr (decay == decay_kind::vector) kd_ = k_.cwiseProduct(f_);
      else kd_ = gam * k_;
      r_ = v_;
      r_.noalias() -= kd_ * Hp;
      dk_.noalias() = (beta * r_) * dH_.transpose();
      hd_.noalias() = du_ * Hp.transpose();  // H_{t-1} du
      if constexpr (decay == decay_kind::vector) dk_ -= beta * hd_.cwiseProduct(f_);
      else dk_ -= (beta * gam) * hd_;
      const A dbeta = du_.dot(r_);
      dH_.noalias() -= (beta * k_).transpose() * du_;
      const beta_partials<A> bp = Rule::beta_derivatives(in, b, t, hv, sq);
      dk_ += (A(2) * dbeta * bp.d_key_sqnorm) * k_;
      const auto dparam = Rule::beta_gradient(gr);
      if (dparam.given()) store_value(dparam, dbeta * bp.d_input, b, t, hv);
      du_ *= beta;  // dv
    } else {
      dk_.noalias() = v_ * dH_.transpose();
    }
    // Decay: dg = <dH', H'>, then dH <- gradient of H_{t-1}.
    if constexpr (decay == decay_kind::scalar) {
      store_value(gr.dg, gam * dH_.cwiseProduct(Hp).sum(), b, t, hv);
      dH_ *= gam;
    } else if constexpr (decay == decay_kind::vector) {
      dgv_ = f_.cwiseProduct(dH_.cwiseProduct(Hp).rowwise().sum().transpose());
      store_rows(gr.dg, b, t, hv, 1, dgv_);
      dH_ = f_.asDiagonal() * dH_;
    }
    store_gradient_rows(gr.dq, b, t, hq, 1, dq_, scale, add);
    store_gradient_rows(gr.dk, b, t, hq, 1, dk_, A(1), add);
    store_rows(gr.dv, b, t, hv, 1, du_);
  }

  index_t chunk_;
  std::vector<mat<A>> checkpoints_;  // [chunks] states at chunk starts   [K, V] each
  std::vector<mat<A>> states_;       // [chunk + 1] states inside one chunk
  mat<A> dH_;                        // [K, V] gradient of the current state
  row_vec<A> q_, k_, v_, r_, do_, du_, dq_, dk_;
  row_vec<A> kd_, hd_;               // [K] decayed key, H_{t-1} du (Householder)
  row_vec<A> f_, dgv_;               // [K] vector decay factors, dg row
};

}  // namespace linattn::cpu
