// SPDX-License-Identifier: MIT
/// \file
/// The float64 oracle: the recurrences of docs/math.md written out directly, one token at a time,
/// with plain loops and the natural orientation S [V x K] (o_t = S_t q_t). Shares no code with
/// the library.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace ref {

/// Sizes of a test problem. Layouts are the library's: q, k [B, T, H, K]; v, o [B, T, HV, V];
/// scalar gates [B, T, HV]; vector gates [B, T, HV, K]; states [N, HV, K, V] (= S^T).
struct dims {
  int B = 1, T = 1, H = 1, HV = 1, K = 1, V = 1;
};

enum class decay { none, scalar, vector };

/// Which update: additive (S += v k^T), delta rule with beta = `beta`, or Longhorn with
/// beta = delta / (1 + delta ||k||^2) where `beta` holds delta, or NLMS with
/// beta = 1 / (||k||^2 + eps_k) (`beta` unused), or Longhorn's diagonal rule (the official
/// code's): every entry S_ji decays by 1 - eps k_i^2, then S += eps v k^T, with
/// eps = delta / (1 + delta ||k||^2) and `beta` holding delta.
enum class update { additive, delta, longhorn, nlms, longhorn_diagonal };

/// All inputs of a call in float64. `g` follows `decay`; `beta` ([B, T, HV]) is used by the
/// delta-rule updates; `s0` is empty (zero start) or [N, HV, K, V]; `cu` is empty or the
/// N + 1 offsets of a packed batch (then B == 1).
struct problem {
  dims d;
  decay kind = decay::none;
  update rule = update::additive;
  double scale = 1.0;
  double eps_k = 1e-6;  // NLMS
  bool normalize_qk = false;  // q, k rows divided by sqrt(||row||^2 + 1e-6) before anything else
  std::vector<double> q, k, v, g, beta, s0;
  std::vector<std::int64_t> cu;

  int sequences() const { return cu.empty() ? d.B : static_cast<int>(cu.size()) - 1; }
  std::size_t qk_at(int b, int t, int h, int i) const { return ((std::size_t(b) * d.T + t) * d.H + h) * d.K + i; }
  std::size_t v_at(int b, int t, int hv, int j) const { return ((std::size_t(b) * d.T + t) * d.HV + hv) * d.V + j; }
  std::size_t tok_at(int b, int t, int hv) const { return (std::size_t(b) * d.T + t) * d.HV + hv; }
  std::size_t s_at(int n, int hv, int i, int j) const { return ((std::size_t(n) * d.HV + hv) * d.K + i) * d.V + j; }
};

struct result {
  std::vector<double> o;  // [B, T, HV, V]
  std::vector<double> s;  // [N, HV, K, V]
};

/// One token of Longhorn's diagonal rule on S ([V, K], S[j * K + i] = S_{j,i}):
/// S_ji <- (1 - eps k_i^2) S_ji + eps v_j k_i, eps = delta / (1 + delta ||k||^2).
inline void longhorn_diagonal_step(const problem& p, int b, int t, int h, int hv, std::vector<double>& S) {
  const dims& d = p.d;
  double kk = 0;
  for (int i = 0; i < d.K; ++i) kk += p.k[p.qk_at(b, t, h, i)] * p.k[p.qk_at(b, t, h, i)];
  const double delta = p.beta[p.tok_at(b, t, hv)], eps = delta / (1.0 + delta * kk);
  for (int j = 0; j < d.V; ++j)
    for (int i = 0; i < d.K; ++i) {
      const double ki = p.k[p.qk_at(b, t, h, i)];
      S[j * d.K + i] = (1.0 - eps * ki * ki) * S[j * d.K + i] + eps * p.v[p.v_at(b, t, hv, j)] * ki;
    }
}

/// One token of the other updates on S ([V, K]): the decay, then the (corrected) write.
inline void matrix_step(const problem& p, int b, int t, int h, int hv, std::vector<double>& S) {
  const dims& d = p.d;
  for (int j = 0; j < d.V; ++j)
    for (int i = 0; i < d.K; ++i) {
      double decay = 1.0;
      if (p.kind == decay::scalar) decay = std::exp(p.g[p.tok_at(b, t, hv)]);
      if (p.kind == decay::vector) decay = std::exp(p.g[p.tok_at(b, t, hv) * d.K + i]);
      S[j * d.K + i] *= decay;
    }
  double beta = 1.0;  // additive: plain write of v k^T
  if (p.rule != update::additive) {
    double kk = 0;
    for (int i = 0; i < d.K; ++i) kk += p.k[p.qk_at(b, t, h, i)] * p.k[p.qk_at(b, t, h, i)];
    if (p.rule == update::nlms) beta = 1.0 / (kk + p.eps_k);
    else beta = p.beta[p.tok_at(b, t, hv)];
    if (p.rule == update::longhorn) beta = beta / (1.0 + beta * kk);
  }
  for (int j = 0; j < d.V; ++j) {
    double sk = 0;  // (S k)_j, zero for the additive write
    if (p.rule != update::additive)
      for (int i = 0; i < d.K; ++i) sk += S[j * d.K + i] * p.k[p.qk_at(b, t, h, i)];
    const double w = beta * (p.v[p.v_at(b, t, hv, j)] - sk);
    for (int i = 0; i < d.K; ++i) S[j * d.K + i] += w * p.k[p.qk_at(b, t, h, i)];
  }
}

/// docs/math.md#hebbian through docs/math.md#longhorn, token by token:
///   additive:  S_t = decay_t(S_{t-1}) + v_t k_t^T
///   delta:     S_t = decay_t(S_{t-1}) (I - beta_t k_t k_t^T) + beta_t v_t k_t^T
///   longhorn:  the delta update with beta_t = delta_t / (1 + delta_t ||k_t||^2)
///   nlms:      the delta update with beta_t = 1 / (||k_t||^2 + eps_k)
///   longhorn_diagonal (docs/math.md#longhorn-official): longhorn_diagonal_step
/// and o_t = S_t (scale q_t). With normalize_qk, every q and k row x is first replaced by
/// x / sqrt(||x||^2 + 1e-6).
inline result run(const problem& p) {
  const dims& d = p.d;
  if (p.normalize_qk) {
    problem u = p;
    u.normalize_qk = false;
    for (std::vector<double>* x : {&u.q, &u.k})
      for (std::size_t row = 0; row < x->size(); row += std::size_t(d.K)) {
        double ss = 0;
        for (int i = 0; i < d.K; ++i) ss += (*x)[row + i] * (*x)[row + i];
        for (int i = 0; i < d.K; ++i) (*x)[row + i] /= std::sqrt(ss + 1e-6);
      }
    return run(u);
  }
  const int N = p.sequences();
  result r;
  r.o.assign(std::size_t(d.B) * d.T * d.HV * d.V, 0.0);
  r.s.assign(std::size_t(N) * d.HV * d.K * d.V, 0.0);
  std::vector<double> S(std::size_t(d.V) * d.K);  // S[j * K + i] = S_{j,i}
  for (int n = 0; n < N; ++n) {
    const int b = p.cu.empty() ? n : 0;
    const int t0 = p.cu.empty() ? 0 : int(p.cu[n]);
    const int t1 = p.cu.empty() ? d.T : int(p.cu[n + 1]);
    for (int hv = 0; hv < d.HV; ++hv) {
      const int h = hv / (d.HV / d.H);
      for (int j = 0; j < d.V; ++j)
        for (int i = 0; i < d.K; ++i) S[j * d.K + i] = p.s0.empty() ? 0.0 : p.s0[p.s_at(n, hv, i, j)];
      for (int t = t0; t < t1; ++t) {
        if (p.rule == update::longhorn_diagonal) longhorn_diagonal_step(p, b, t, h, hv, S);
        else matrix_step(p, b, t, h, hv, S);
        for (int j = 0; j < d.V; ++j) {
          double o = 0;
          for (int i = 0; i < d.K; ++i) o += S[j * d.K + i] * p.scale * p.q[p.qk_at(b, t, h, i)];
          r.o[p.v_at(b, t, hv, j)] = o;
        }
      }
      for (int j = 0; j < d.V; ++j)
        for (int i = 0; i < d.K; ++i) r.s[p.s_at(n, hv, i, j)] = S[j * d.K + i];
    }
  }
  return r;
}

}  // namespace ref
