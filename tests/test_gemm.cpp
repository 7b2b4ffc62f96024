// SPDX-License-Identifier: MIT
// The CPU kernels' small-product routine (cpu/linalg/gemm.hpp) against a double product: row
// factors of A B and of C, both operand layouts, the causal triangles, and sums longer than its
// k block (256), on shapes that leave partial row tiles and masked last packets.
#include "support/catch.hpp"

#include <linattn/cpu/linalg/gemm.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace cpu = linattn::cpu;
using linattn::index_t;
using mat = cpu::mat<float>;
using dmat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {

mat random_mat(index_t rows, index_t cols, std::mt19937& gen) {
  std::normal_distribution<float> nd;
  mat x(rows, cols);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) x(i, j) = nd(gen);
  return x;
}

struct product_case {
  index_t m, n, k;
  cpu::triangle tri;
  index_t diag;
  bool transposed_a;  // A read through cols_of (Aᵀ stored row-major)
  bool row_alpha, row_beta;
  float beta;
};

template <cpu::triangle Tri>
void run(const product_case& c, std::mt19937& gen) {
  mat A = c.transposed_a ? random_mat(c.k, c.m, gen) : random_mat(c.m, c.k, gen);  // [m, k] or its transpose
  if (Tri == cpu::triangle::lower_a)  // the contract: A(i, p) = 0 for p > i + d
    for (index_t i = 0; i < c.m; ++i)
      for (index_t p = std::max<index_t>(0, i + c.diag + 1); p < c.k; ++p) (c.transposed_a ? A(p, i) : A(i, p)) = 0;
  const mat B = random_mat(c.k, c.n, gen);
  const mat C0 = random_mat(c.m, c.n, gen);
  std::vector<float> ra(std::size_t(c.m)), rb(std::size_t(c.m));
  std::uniform_real_distribution<float> ud(0.25f, 1.5f);
  for (index_t i = 0; i < c.m; ++i) ra[std::size_t(i)] = ud(gen), rb[std::size_t(i)] = ud(gen);

  mat C = C0;
  if (c.beta == 0.0f) C.setConstant(std::numeric_limits<float>::quiet_NaN());  // beta = 0 must not read C
  const cpu::gemm_params<float> x{.alpha = 0.75f,
                                  .row_alpha = c.row_alpha ? ra.data() : nullptr,
                                  .beta = c.beta,
                                  .row_beta = c.row_beta ? rb.data() : nullptr,
                                  .diag = c.diag};
  cpu::gemm<Tri>(C, c.transposed_a ? cpu::cols_of(A) : cpu::rows_of(A), B, x);

  const dmat Ad = c.transposed_a ? dmat(A.cast<double>().transpose()) : dmat(A.cast<double>());
  const dmat AB = Ad * B.cast<double>();
  double worst = 0;
  index_t compared = 0;
  for (index_t i = 0; i < c.m; ++i)
    for (index_t j = 0; j < c.n; ++j) {
      if (Tri == cpu::triangle::lower_c && j > i + c.diag) continue;  // not computed
      const double a = 0.75 * (c.row_alpha ? ra[std::size_t(i)] : 1.0);
      const double b = c.beta == 0.0f ? 0.0 : double(c.beta) * (c.row_beta ? rb[std::size_t(i)] : 1.0);
      const double want = a * AB(i, j) + b * double(C0(i, j));
      // error bound of a float sum of k products of N(0, 1) entries: a few ulps of sqrt(k)
      const double err = std::abs(double(C(i, j)) - want) / (std::sqrt(double(c.k)) + std::abs(want));
      worst = std::isfinite(double(C(i, j))) ? std::max(worst, err) : std::numeric_limits<double>::infinity();
      ++compared;
    }
  INFO("m " << c.m << " n " << c.n << " k " << c.k << " diag " << c.diag << " transposed A " << c.transposed_a
            << " row_alpha " << c.row_alpha << " row_beta " << c.row_beta << " beta " << c.beta);
  CHECK(compared > 0);
  CHECK(worst < 1e-5);
}

}  // namespace

TEST_CASE("gemm matches a double product with row factors, triangles and long sums", "[gemm]") {
  std::mt19937 gen(20261204);
  for (index_t m : {1, 7, 16, 33})
    for (index_t n : {5, 64, 130})
      for (index_t k : {1, 16, 300})
        for (bool ta : {false, true})
          for (float beta : {0.0f, 1.0f, 0.6f})
            for (bool rb : {false, true}) {
              const bool ra = (m + n + k) % 2 == 0;
              run<cpu::triangle::none>({m, n, k, cpu::triangle::none, 0, ta, ra, rb, beta}, gen);
              for (index_t d : {index_t(0), index_t(-1), index_t(5)}) {
                run<cpu::triangle::lower_a>({m, n, k, cpu::triangle::lower_a, d, ta, ra, rb, beta}, gen);
                if (d + m > 0) run<cpu::triangle::lower_c>({m, n, k, cpu::triangle::lower_c, d, ta, ra, rb, beta}, gen);
              }
            }
}

TEST_CASE("gemm's row factor of C keeps 0 * inf a NaN, as a separate scaling pass would", "[gemm]") {
  std::mt19937 gen(7);
  const mat A = random_mat(3, 4, gen), B = random_mat(4, 16, gen);
  mat C = random_mat(3, 16, gen);
  C(1, 2) = std::numeric_limits<float>::infinity();
  const std::vector<float> rb{1.0f, 0.0f, 0.5f};
  cpu::gemm(C, cpu::rows_of(A), B, {.beta = 1.0f, .row_beta = rb.data()});
  CHECK(std::isnan(C(1, 2)));
  CHECK(std::isfinite(C(1, 3)));
  CHECK(std::isfinite(C(0, 2)));
}
