// SPDX-License-Identifier: MIT
/// \file
/// Float64 oracle for TTT-Linear, written from docs/math.md#ttt-linear with plain loops in the
/// natural orientation S [D x D] (S = W1^T, z = S k + b) and sharing no code with the library.
/// The mini-batch definition (docs/math.md#ttt-mini-batch) is computed as written: all
/// gradients at the mini-batch start, the post-update weights S_i materialised for every token
/// i. Also: the plain online-GD loop (b = 1, docs/math.md#ttt-forms), the linear inner model
/// f_S(x) = S x (the "linear special case" there) and the loss itself (for finite
/// differences).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ttt_ref {

/// q, k [B, T, H, D]; v, o [B, T, HV, D]; eta [B, T, HV]; gam, bet [HV, D]; tau [mb] (empty:
/// 1/i). States in the library's layout: w [N, HV, D, D] (row = input dim: w[n,hv,i,j] =
/// S(j, i)); bias [N, HV, D]; cache [N, HV, D + 2, D] (rows 0..D-1: sum c k g^T in the layout
/// of w, row D: sum c g, row D + 1: [position, 0...]).
struct problem {
  int B = 1, T = 1, H = 1, HV = 1, D = 1;
  int mb = 16;
  bool linear = false;  // f_S(x) = S x: no LayerNorm, no residual, no bias
  double scale = 1.0;
  std::vector<double> q, k, v, eta, gam, bet, tau;
  std::vector<double> w0, b0, cache0;  // empty: zero / no carried mini-batch
  std::vector<std::int64_t> cu;

  int sequences() const { return cu.empty() ? B : static_cast<int>(cu.size()) - 1; }
  std::size_t qk_at(int b, int t, int h, int i) const { return ((std::size_t(b) * T + t) * H + h) * D + i; }
  std::size_t v_at(int b, int t, int hv, int i) const { return ((std::size_t(b) * T + t) * HV + hv) * D + i; }
  std::size_t tok_at(int b, int t, int hv) const { return (std::size_t(b) * T + t) * HV + hv; }
  std::size_t w_at(int n, int hv, int i, int j) const { return ((std::size_t(n) * HV + hv) * D + i) * D + j; }
  std::size_t b_at(int n, int hv, int i) const { return (std::size_t(n) * HV + hv) * D + i; }
  std::size_t c_at(int n, int hv, int i, int j) const { return ((std::size_t(n) * HV + hv) * (D + 2) + i) * D + j; }
  double tau_at(int i) const { return tau.empty() ? 1.0 / i : tau[std::size_t(i - 1)]; }
};

struct result {
  std::vector<double> o;                           // [B, T, HV, D]
  std::vector<double> w, bias;                     // weights after the last token
  std::vector<double> w_start, bias_start, cache;  // start of the unfinished mini-batch + cache
};

using vec = std::vector<double>;
using matrix = std::vector<vec>;  // matrix[i][j]

/// LN(z) = gam ⊙ (z - mu) / sd + bet (biased variance, eps = 1e-6); also returns xh and sd.
inline vec layer_norm(const vec& z, const vec& gam, const vec& bet, vec* xh_out = nullptr, double* sd_out = nullptr) {
  const std::size_t d = z.size();
  double mu = 0, var = 0;
  for (double e : z) mu += e;
  mu /= double(d);
  for (double e : z) var += (e - mu) * (e - mu);
  const double sd = std::sqrt(var / double(d) + 1e-6);
  vec y(d), xh(d);
  for (std::size_t i = 0; i < d; ++i) {
    xh[i] = (z[i] - mu) / sd;
    y[i] = gam[i] * xh[i] + bet[i];
  }
  if (xh_out) *xh_out = xh;
  if (sd_out) *sd_out = sd;
  return y;
}

/// ell(z) = 1/2 ||LN(z) - y||^2 with y = v - k (docs/math.md#ttt-inner-model).
inline double loss(const vec& z, const vec& y, const vec& gam, const vec& bet) {
  const vec l = layer_norm(z, gam, bet);
  double s = 0;
  for (std::size_t i = 0; i < z.size(); ++i) s += 0.5 * (l[i] - y[i]) * (l[i] - y[i]);
  return s;
}

/// dl/dz by the fused formula of docs/math.md#ttt-gradient.
inline vec grad_z(const vec& z, const vec& y, const vec& gam, const vec& bet) {
  const std::size_t d = z.size();
  vec xh;
  double sd = 0;
  const vec l = layer_norm(z, gam, bet, &xh, &sd);
  vec gx(d);
  double sum_gx = 0, xh_gx = 0;
  for (std::size_t i = 0; i < d; ++i) {
    gx[i] = gam[i] * (l[i] - y[i]);
    sum_gx += gx[i];
    xh_gx += xh[i] * gx[i];
  }
  vec g(d);
  for (std::size_t i = 0; i < d; ++i) g[i] = (double(d) * gx[i] - sum_gx - xh_gx * xh[i]) / (double(d) * sd);
  return g;
}

inline vec mat_vec(const matrix& S, const vec& x) {
  vec y(S.size(), 0.0);
  for (std::size_t i = 0; i < S.size(); ++i)
    for (std::size_t j = 0; j < x.size(); ++j) y[i] += S[i][j] * x[j];
  return y;
}

namespace detail {

struct head_io {
  const problem& p;
  int b, h, hv;
  vec row(const vec& x, bool qk, int t, double f = 1.0) const {
    vec r(std::size_t(p.D));
    for (int i = 0; i < p.D; ++i) r[i] = f * x[qk ? p.qk_at(b, t, h, i) : p.v_at(b, t, hv, i)];
    return r;
  }
  vec gam() const { return vec(p.gam.begin() + hv * p.D, p.gam.begin() + (hv + 1) * p.D); }
  vec bet() const { return vec(p.bet.begin() + hv * p.D, p.bet.begin() + (hv + 1) * p.D); }
};

/// Gradient of the inner loss at (S, bias) for key k and value v (linear: S k - v).
inline vec gradient(const problem& p, const matrix& S, const vec& bias, const vec& k, const vec& v, const vec& gam,
                    const vec& bet) {
  vec z = mat_vec(S, k);
  if (p.linear) {
    for (std::size_t i = 0; i < z.size(); ++i) z[i] -= v[i];
    return z;
  }
  vec y(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) {
    z[i] += bias[i];
    y[i] = v[i] - k[i];
  }
  return grad_z(z, y, gam, bet);
}

/// Output for query q with weights (S, bias): q + LN(S q + b), or S q (linear).
inline vec read(const problem& p, const matrix& S, const vec& bias, const vec& q, const vec& gam, const vec& bet) {
  vec z = mat_vec(S, q);
  if (p.linear) return z;
  for (std::size_t i = 0; i < z.size(); ++i) z[i] += bias[i];
  vec o = layer_norm(z, gam, bet);
  for (std::size_t i = 0; i < o.size(); ++i) o[i] += q[i];
  return o;
}

}  // namespace detail

/// docs/math.md#ttt-mini-batch with a carried unfinished mini-batch (cache0,
/// docs/math.md#ttt-decode).
inline result run(const problem& p) {
  const int D = p.D, N = p.sequences();
  result r;
  r.o.assign(std::size_t(p.B) * p.T * p.HV * D, 0.0);
  r.w.assign(std::size_t(N) * p.HV * D * D, 0.0);
  r.bias.assign(std::size_t(N) * p.HV * D, 0.0);
  r.w_start = r.w;
  r.bias_start = r.bias;
  r.cache.assign(std::size_t(N) * p.HV * (D + 2) * D, 0.0);
  for (int n = 0; n < N; ++n) {
    const int b = p.cu.empty() ? n : 0;
    const int t0 = p.cu.empty() ? 0 : int(p.cu[n]);
    const int t1 = p.cu.empty() ? p.T : int(p.cu[n + 1]);
    for (int hv = 0; hv < p.HV; ++hv) {
      const detail::head_io io{p, b, hv / (p.HV / p.H), hv};
      const vec gam = io.gam(), bet = io.bet();
      matrix S0(D, vec(D, 0.0)), A(D, vec(D, 0.0));  // A = sum c g k^T (S orientation)
      vec b0(D, 0.0), a(D, 0.0);
      int pos = 0;
      for (int i = 0; i < D; ++i)
        for (int j = 0; j < D; ++j) {
          if (!p.w0.empty()) S0[i][j] = p.w0[p.w_at(n, hv, j, i)];
          if (!p.cache0.empty()) A[i][j] = p.cache0[p.c_at(n, hv, j, i)];
        }
      for (int i = 0; i < D; ++i) {
        if (!p.b0.empty()) b0[i] = p.b0[p.b_at(n, hv, i)];
        if (!p.cache0.empty()) a[i] = p.cache0[p.c_at(n, hv, D, i)];
      }
      if (!p.cache0.empty()) pos = int(p.cache0[p.c_at(n, hv, D + 1, 0)]);

      for (int s = t0; s < t1;) {
        const int len = std::min(p.mb - pos, t1 - s);  // tokens of this mini-batch in the sequence
        // all gradients at the mini-batch start, weighted by their steps
        std::vector<vec> cg(len), ks(len);
        for (int j = 0; j < len; ++j) {
          ks[j] = io.row(p.k, true, s + j);
          const vec g = detail::gradient(p, S0, b0, ks[j], io.row(p.v, false, s + j), gam, bet);
          cg[j] = g;
          for (double& e : cg[j]) e *= p.eta[p.tok_at(b, s + j, hv)];
        }
        for (int i = 0; i < len; ++i) {
          const double tau = p.tau_at(pos + i + 1);
          matrix Si = S0;
          vec bi = b0;
          for (int r1 = 0; r1 < D; ++r1) {
            double sum_b = a[r1];
            for (int j = 0; j <= i; ++j) sum_b += cg[j][r1];
            if (!p.linear) bi[r1] -= tau * sum_b;
            for (int c1 = 0; c1 < D; ++c1) {
              double sum = A[r1][c1];
              for (int j = 0; j <= i; ++j) sum += cg[j][r1] * ks[j][c1];
              Si[r1][c1] -= tau * sum;
            }
          }
          const vec o = detail::read(p, Si, bi, io.row(p.q, true, s + i, p.scale), gam, bet);
          for (int c1 = 0; c1 < D; ++c1) r.o[p.v_at(b, s + i, hv, c1)] = o[c1];
        }
        for (int j = 0; j < len; ++j)
          for (int r1 = 0; r1 < D; ++r1) {
            if (!p.linear) a[r1] += cg[j][r1];
            for (int c1 = 0; c1 < D; ++c1) A[r1][c1] += cg[j][r1] * ks[j][c1];
          }
        pos += len;
        s += len;
        if (pos == p.mb) {  // carry the post-update weights of the last token
          const double tau = p.tau_at(p.mb);
          for (int r1 = 0; r1 < D; ++r1) {
            b0[r1] -= tau * a[r1];
            a[r1] = 0;
            for (int c1 = 0; c1 < D; ++c1) {
              S0[r1][c1] -= tau * A[r1][c1];
              A[r1][c1] = 0;
            }
          }
          pos = 0;
        }
      }
      const double tau_end = pos > 0 ? p.tau_at(pos) : 0.0;
      for (int i = 0; i < D; ++i) {
        r.bias_start[p.b_at(n, hv, i)] = b0[i];
        r.bias[p.b_at(n, hv, i)] = b0[i] - tau_end * a[i];
        r.cache[p.c_at(n, hv, D, i)] = a[i];
        for (int j = 0; j < D; ++j) {  // library layout: [input j][output i]
          r.w_start[p.w_at(n, hv, j, i)] = S0[i][j];
          r.w[p.w_at(n, hv, j, i)] = S0[i][j] - tau_end * A[i][j];
          r.cache[p.c_at(n, hv, j, i)] = A[i][j];
        }
      }
      r.cache[p.c_at(n, hv, D + 1, 0)] = pos;
    }
  }
  return r;
}

/// The sequential online-GD loop of docs/math.md#ttt-forms (b = 1): per token, one gradient
/// step with eta_t = tau_1 c_t at the current weights, then the read. Outputs and final (w, bias).
inline result online_gd(const problem& p) {
  const int D = p.D, N = p.sequences();
  result r;
  r.o.assign(std::size_t(p.B) * p.T * p.HV * D, 0.0);
  r.w.assign(std::size_t(N) * p.HV * D * D, 0.0);
  r.bias.assign(std::size_t(N) * p.HV * D, 0.0);
  for (int n = 0; n < N; ++n) {
    const int b = p.cu.empty() ? n : 0;
    const int t0 = p.cu.empty() ? 0 : int(p.cu[n]);
    const int t1 = p.cu.empty() ? p.T : int(p.cu[n + 1]);
    for (int hv = 0; hv < p.HV; ++hv) {
      const detail::head_io io{p, b, hv / (p.HV / p.H), hv};
      const vec gam = io.gam(), bet = io.bet();
      matrix S(D, vec(D, 0.0));
      vec bias(D, 0.0);
      for (int i = 0; i < D; ++i) {
        if (!p.b0.empty()) bias[i] = p.b0[p.b_at(n, hv, i)];
        for (int j = 0; j < D; ++j)
          if (!p.w0.empty()) S[i][j] = p.w0[p.w_at(n, hv, j, i)];
      }
      for (int t = t0; t < t1; ++t) {
        const vec k = io.row(p.k, true, t);
        const vec g = detail::gradient(p, S, bias, k, io.row(p.v, false, t), gam, bet);
        const double eta = p.tau_at(1) * p.eta[p.tok_at(b, t, hv)];
        for (int i = 0; i < D; ++i) {
          if (!p.linear) bias[i] -= eta * g[i];
          for (int j = 0; j < D; ++j) S[i][j] -= eta * g[i] * k[j];
        }
        const vec o = detail::read(p, S, bias, io.row(p.q, true, t, p.scale), gam, bet);
        for (int i = 0; i < D; ++i) r.o[p.v_at(b, t, hv, i)] = o[i];
      }
      for (int i = 0; i < D; ++i) {
        r.bias[p.b_at(n, hv, i)] = bias[i];
        for (int j = 0; j < D; ++j) r.w[p.w_at(n, hv, j, i)] = S[i][j];
      }
    }
  }
  return r;
}

}  // namespace ttt_ref
