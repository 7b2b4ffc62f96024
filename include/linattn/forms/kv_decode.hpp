// SPDX-License-Identifier: MIT
/// \file
/// `decode_step<Rule>(in, out, cache, opt)`: decoding for rules without a matrix state
/// (SoftmaxAttention): appends each sequence's new token(s) to a `kv_cache` and attends over
/// everything cached. Inputs `[B, T, ...]` with B = cache.batch() (usually T = 1; T > 1 runs
/// the tokens in order), out `[B, T, HV, V]`. options::scale and threads apply; the state
/// options and cu_seqlens must be left unset.
#pragma once

#include <string>
#include <type_traits>

#include "../core/kv_cache.hpp"
#include "../core/options.hpp"
#include "../core/validate.hpp"
#include "../cpu/io/qk_normalization.hpp"
#include "../cpu/softmax/algorithms.hpp"
#include "../cpu/runtime/task_runner.hpp"

namespace linattn {

template <rule Rule, class T>
  requires std::is_same_v<typename Rule::family, softmax_family>
void decode_step(const std::type_identity_t<typename Rule::template inputs<std::remove_const_t<T>>>& in,
                 tensor_view<T, 4> out, kv_cache<state_t<T>>& cache, const options<state_t<T>>& opt = {}) {
  using A = state_t<T>;
  using U = std::remove_const_t<T>;
  detail::call_checker<Rule, U, A> c(detail::form::decode, in, opt);
  const detail::problem p = detail::validate<Rule>(detail::form::decode, in, out, opt);
  if (cache.batch() != p.B || cache.heads() != p.H || cache.value_heads() != p.HV || cache.key_dim() != p.K ||
      cache.value_dim() != p.V)
    c.fail("cache", "has (batch, heads, value_heads, key_dim, value_dim) = (" + std::to_string(cache.batch()) + ", " +
                        std::to_string(cache.heads()) + ", " + std::to_string(cache.value_heads()) + ", " +
                        std::to_string(cache.key_dim()) + ", " + std::to_string(cache.value_dim()) +
                        "), expected (B, H, HV, K, V) of the inputs = (" + std::to_string(p.B) + ", " +
                        std::to_string(p.H) + ", " + std::to_string(p.HV) + ", " + std::to_string(p.K) + ", " +
                        std::to_string(p.V) + ")");
  const cpu::qk_normalized<typename Rule::template inputs<U>> qk(in, opt.normalize_qk, opt.threads);
  const auto& x = qk.inputs();
  for (index_t t = 0; t < p.T; ++t) {
    for (index_t b = 0; b < p.B; ++b)
      cache.append(b, [&](index_t h, index_t i) { return x.k(b, t, h, i); },
                   [&](index_t hv, index_t j) { return x.v(b, t, hv, j); });
    cpu::for_each_head(
        p, [&] { return std::tuple<cpu::row_vec<A>, cpu::col_vec<A>, cpu::row_vec<A>>(p.K, 0, p.V); },
        [&](auto& w, const cpu::head_task& h) {
          auto& [q, s, o] = w;
          cpu::load_rows(x.q, h.b, t, h.hq, 1, q, static_cast<A>(p.scale));
          cpu::softmax_read(cache.keys(h.b, h.hq), cache.values(h.b, h.hv), cache.length(h.b), p.K, p.V, q, s, o);
          cpu::store_rows(out, h.b, t, h.hv, 1, o);
        });
  }
}

}  // namespace linattn
