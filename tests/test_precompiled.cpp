// SPDX-License-Identifier: MIT
// linattn::precompiled used on its own: this file includes <linattn/precompiled.hpp> only (no
// Eigen, no kernel is compiled here) and links the library. The forms it calls are checked
// against a float64 recurrence written out here and against each other.
#include <linattn/precompiled.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

#include "support/catch.hpp"

#ifdef EIGEN_WORLD_VERSION
#error "<linattn/precompiled.hpp> must not pull in Eigen"
#endif

namespace {
namespace la = linattn;
using la::index_t;

constexpr index_t B = 2, T = 37, H = 2, HV = 4, K = 8, V = 5;  // T odd, K != V, 2 value heads per q/k head

std::vector<double> draw(std::mt19937_64& rng, std::size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> x(n);
  for (auto& e : x) e = u(rng);
  return x;
}

template <class To, class From>
std::vector<To> as(const std::vector<From>& x) {
  return std::vector<To>(x.begin(), x.end());
}

double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
  return std::sqrt(num / den);
}

/// Random gated-delta inputs with unit keys: q, k [B, T, H, K], v [B, T, HV, V], g, beta [B, T, HV].
struct gated_delta_data {
  std::vector<double> q, k, v, g, beta;
  explicit gated_delta_data(std::mt19937_64& rng)
      : q(draw(rng, B * T * H * K, -1, 1)), k(draw(rng, B * T * H * K, -1, 1)), v(draw(rng, B * T * HV * V, -1, 1)),
        g(draw(rng, B * T * HV, -3, 0)), beta(draw(rng, B * T * HV, 0, 1)) {
    for (index_t r = 0; r < B * T * H; ++r) {
      double n = 0;
      for (index_t i = 0; i < K; ++i) n += k[r * K + i] * k[r * K + i];
      for (index_t i = 0; i < K; ++i) k[r * K + i] /= std::sqrt(n);
    }
  }
};

/// The gated delta rule token by token in float64: S_t = exp(g) S (I - beta k k^T) + beta v k^T,
/// o_t = scale S_t q_t (S stored [K, V]); returns o [B, T, HV, V].
std::vector<double> gated_delta_reference(const gated_delta_data& d) {
  std::vector<double> o(B * T * HV * V);
  const double scale = 1.0 / std::sqrt(double(K));
  for (index_t b = 0; b < B; ++b)
    for (index_t hv = 0; hv < HV; ++hv) {
      const index_t h = hv / (HV / H);
      std::vector<double> S(K * V, 0.0);
      for (index_t t = 0; t < T; ++t) {
        const double* q = &d.q[((b * T + t) * H + h) * K];
        const double* k = &d.k[((b * T + t) * H + h) * K];
        const double* v = &d.v[((b * T + t) * HV + hv) * V];
        const double a = std::exp(d.g[(b * T + t) * HV + hv]), be = d.beta[(b * T + t) * HV + hv];
        for (index_t j = 0; j < V; ++j) {
          double kS = 0;
          for (index_t i = 0; i < K; ++i) kS += k[i] * S[i * V + j];
          for (index_t i = 0; i < K; ++i) S[i * V + j] = a * (S[i * V + j] - be * k[i] * kS) + be * k[i] * v[j];
          double out = 0;
          for (index_t i = 0; i < K; ++i) out += q[i] * S[i * V + j];
          o[((b * T + t) * HV + hv) * V + j] = scale * out;
        }
      }
    }
  return o;
}

template <class Real>
la::GatedDelta::inputs<Real> gated_delta_inputs(const std::vector<Real>& q, const std::vector<Real>& k,
                                               const std::vector<Real>& v, const std::vector<Real>& g,
                                               const std::vector<Real>& beta) {
  return {la::view(q.data(), B, T, H, K), la::view(k.data(), B, T, H, K), la::view(v.data(), B, T, HV, V),
          la::view(g.data(), B, T, HV), la::view(beta.data(), B, T, HV)};
}

}  // namespace

TEST_CASE("precompiled GatedDelta forms match a float64 recurrence", "[precompiled]") {
  std::mt19937_64 rng(7);
  const gated_delta_data d(rng);
  const std::vector<double> want = gated_delta_reference(d);
  const auto q = as<float>(d.q), k = as<float>(d.k), v = as<float>(d.v), g = as<float>(d.g), beta = as<float>(d.beta);
  const auto in = gated_delta_inputs(q, k, v, g, beta);
  std::vector<float> out(B * T * HV * V);
  la::options<float> opt;
  opt.chunk_size = 16;
  la::chunkwise_forward<la::GatedDelta>(in, la::view(out.data(), B, T, HV, V), opt);
  CHECK(rel_err(as<double>(out), want) < 1e-5);
  la::recurrent_forward<la::GatedDelta>(in, la::view(out.data(), B, T, HV, V), opt);
  CHECK(rel_err(as<double>(out), want) < 1e-5);

  // decode_step token by token, the state carried in place, at double
  const auto in64 = gated_delta_inputs(d.q, d.k, d.v, d.g, d.beta);
  std::vector<double> state(B * HV * K * V, 0.0), step(B * HV * V), got(B * T * HV * V);
  for (index_t t = 0; t < T; ++t) {
    la::GatedDelta::inputs<double> one{
        la::tensor_view<const double, 4>(&in64.q(0, t, 0, 0), {B, 1, H, K}, {in64.q.stride(0), in64.q.stride(1), K, 1}),
        la::tensor_view<const double, 4>(&in64.k(0, t, 0, 0), {B, 1, H, K}, {in64.k.stride(0), in64.k.stride(1), K, 1}),
        la::tensor_view<const double, 4>(&in64.v(0, t, 0, 0), {B, 1, HV, V}, {in64.v.stride(0), in64.v.stride(1), V, 1}),
        la::tensor_view<const double, 3>(&in64.g(0, t, 0), {B, 1, HV}, {in64.g.stride(0), in64.g.stride(1), 1}),
        la::tensor_view<const double, 3>(&in64.beta(0, t, 0), {B, 1, HV}, {in64.beta.stride(0), in64.beta.stride(1), 1})};
    la::decode_step<la::GatedDelta>(one, la::view(step.data(), B, 1, HV, V), la::view(state.data(), B, HV, K, V));
    for (index_t b = 0; b < B; ++b)
      for (index_t e = 0; e < HV * V; ++e) got[(b * T + t) * HV * V + e] = step[b * HV * V + e];
  }
  CHECK(rel_err(got, want) < 1e-12);
}

TEST_CASE("precompiled Hebbian backward: both forms agree, and dv is exact", "[precompiled]") {
  std::mt19937_64 rng(11);
  const auto q = draw(rng, B * T * H * K, -1, 1), k = draw(rng, B * T * H * K, -1, 1);
  const auto v = draw(rng, B * T * HV * V, -1, 1), dout = draw(rng, B * T * HV * V, -1, 1);
  const auto dir = draw(rng, B * T * HV * V, -1, 1);
  const la::Hebbian::inputs<double> in{la::view(q.data(), B, T, H, K), la::view(k.data(), B, T, H, K),
                                       la::view(v.data(), B, T, HV, V)};
  struct grads {
    std::vector<double> dq = std::vector<double>(B * T * H * K), dk = dq, dv = std::vector<double>(B * T * HV * V);
    la::Hebbian::gradients<double> views() {
      return {la::view(dq.data(), B, T, H, K), la::view(dk.data(), B, T, H, K), la::view(dv.data(), B, T, HV, V)};
    }
  } chunk, token;
  la::backward_options<double> opt;
  opt.chunk_size = 16;
  la::chunkwise_backward<la::Hebbian>(in, la::view(dout.data(), B, T, HV, V), chunk.views(), opt);  // grad_out const
  std::vector<double> dout_mutable = dout;
  la::recurrent_backward<la::Hebbian>(in, la::view(dout_mutable.data(), B, T, HV, V), token.views(), opt);
  CHECK(rel_err(chunk.dq, token.dq) < 1e-12);
  CHECK(rel_err(chunk.dk, token.dk) < 1e-12);
  CHECK(rel_err(chunk.dv, token.dv) < 1e-12);
  // out is linear in v (zero initial state): <dv, dir> = <dout, out(q, k, dir)>
  std::vector<double> out(B * T * HV * V);
  la::parallel_forward<la::Hebbian>({in.q, in.k, la::view(dir.data(), B, T, HV, V)}, la::view(out.data(), B, T, HV, V));
  double lhs = 0, rhs = 0, size = 0;
  for (std::size_t i = 0; i < out.size(); ++i) lhs += chunk.dv[i] * dir[i], rhs += dout[i] * out[i], size += std::abs(dout[i] * out[i]);
  CHECK(std::abs(lhs - rhs) < 1e-12 * size);
}

TEST_CASE("precompiled mLSTM and softmax forms agree with each other", "[precompiled]") {
  std::mt19937_64 rng(5);
  const auto q = draw(rng, B * T * H * K, -1, 1), k = draw(rng, B * T * H * K, -1, 1);
  const auto v = draw(rng, B * T * HV * V, -1, 1), ig = draw(rng, B * T * HV, -2, 4), fg = draw(rng, B * T * HV, -1, 5);
  const la::mLSTM::inputs<double> in{la::view(q.data(), B, T, H, K), la::view(k.data(), B, T, H, K),
                                     la::view(v.data(), B, T, HV, V), la::view(ig.data(), B, T, HV),
                                     la::view(fg.data(), B, T, HV)};
  std::vector<double> chunk(B * T * HV * V), token(chunk.size()), pairs(chunk.size());
  la::options<double> opt;
  opt.chunk_size = 16;
  la::chunkwise_forward<la::mLSTM>(in, la::view(chunk.data(), B, T, HV, V), opt);
  la::recurrent_forward<la::mLSTM>(in, la::view(token.data(), B, T, HV, V), opt);
  la::parallel_forward<la::mLSTM>(in, la::view(pairs.data(), B, T, HV, V), opt);
  CHECK(rel_err(chunk, token) < 1e-10);
  CHECK(rel_err(pairs, token) < 1e-10);

  const la::SoftmaxAttention::inputs<double> sm{la::view(q.data(), B, T, H, K), la::view(k.data(), B, T, H, K),
                                                la::view(v.data(), B, T, HV, V)};
  la::recurrent_forward<la::SoftmaxAttention>(sm, la::view(token.data(), B, T, HV, V), opt);
  la::chunkwise_forward<la::SoftmaxAttention>(sm, la::view(chunk.data(), B, T, HV, V), opt);
  CHECK(rel_err(chunk, token) < 1e-12);
}

TEST_CASE("precompiled calls reject bad arguments", "[precompiled]") {
  std::mt19937_64 rng(3);
  const gated_delta_data d(rng);
  const auto in = gated_delta_inputs(d.q, d.k, d.v, d.g, d.beta);
  std::vector<double> out(B * T * HV * (V + 1), 0.0);
  CHECK_THROWS_AS(la::chunkwise_forward<la::GatedDelta>(in, la::view(out.data(), B, T, HV, V + 1)), la::error);
  CHECK(std::all_of(out.begin(), out.end(), [](double x) { return x == 0.0; }));  // nothing written
}
