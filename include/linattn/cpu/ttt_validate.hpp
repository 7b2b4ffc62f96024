// SPDX-License-Identifier: MIT
/// \file
/// Validation of a TTT call beyond the shared checks (core/validate.hpp): the mini-batch and
/// chunk sizes, LayerNorm parameters, tau, the bias and cache views (shapes, overlaps, the
/// cache's position entries) and the query scale. Throws linattn::error before anything is
/// written. (K == V is checked by TTTLinear::check_inputs.)
#pragma once

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "../core/options.hpp"
#include "../core/validate.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class ttt_checker {
 public:
  using inputs_t = typename Rule::template inputs<T>;

  ttt_checker(detail::form f, const inputs_t& in, const options<A>& opt) : f_(f), in_(in), opt_(opt), base_(f, in, opt) {}

  detail::problem check(const tensor_view<T, 4>& out, const tensor_view<A, 4>* state) {
    p_ = state ? base_.check(out, state) : base_.check(out);
    const index_t D = p_.K, N = p_.N, HV = p_.HV, mb = in_.mini_batch;
    if (mb < 1 || mb > max_chunk_size)
      fail("mini_batch", "is " + std::to_string(mb) + ", expected 1.." + std::to_string(max_chunk_size));
    if (f_ == detail::form::chunkwise && opt_.chunk_size % mb != 0)
      fail("options.chunk_size", "is " + std::to_string(opt_.chunk_size) +
                                     ", expected a multiple of the mini-batch size mini_batch = " + std::to_string(mb));
    expect("ln_weight", in_.ln_weight, std::array<index_t, 2>{HV, D}, "[HV, D]", true);
    expect("ln_bias", in_.ln_bias, std::array<index_t, 2>{HV, D}, "[HV, D]", true);
    expect("tau", in_.tau, std::array<index_t, 1>{mb}, "[mini_batch]", false);
    expect("initial_bias", in_.initial_bias, std::array<index_t, 3>{N, HV, D}, "[N, HV, D]", false);
    expect("final_bias", in_.final_bias, std::array<index_t, 3>{N, HV, D}, "[N, HV, D]", false);
    expect("initial_cache", in_.initial_cache, std::array<index_t, 4>{N, HV, D + 2, D}, "[N, HV, D + 2, D]", false);
    expect("final_cache", in_.final_cache, std::array<index_t, 4>{N, HV, D + 2, D}, "[N, HV, D + 2, D]", false);
    if (f_ == detail::form::decode) {
      if (!in_.final_bias.given())
        fail("final_bias", "is missing; decode_step<TTTLinear> writes the inner bias there (pass the same view as initial_bias to update in place)");
      if (!in_.final_cache.given())
        fail("final_cache", "is missing; decode_step<TTTLinear> carries the unfinished mini-batch there (pass the same view as initial_cache to update in place)");
    }
    check_memory(out, state);
    check_positions();
    if (opt_.check_finite) scan_extras();
    p_.scale = opt_.scale ? *opt_.scale : 1.0;  // TTT: no query scale unless asked for
    return p_;
  }

 private:
  [[noreturn]] void fail(const std::string& arg, const std::string& msg) const { base_.fail(arg, msg); }

  template <class V, std::size_t R>
  void expect(const char* name, const V& x, const std::array<index_t, R>& want, const char* symbolic, bool required) {
    if (!x.given()) {
      if (required) fail(name, "is missing; expected a view of shape " + std::string(symbolic) + " = " + detail::shape_string(want));
      return;
    }
    if (x.extents() != want)
      fail(name, "has shape " + detail::shape_string(x.extents()) + ", expected " + symbolic + " = " + detail::shape_string(want));
    if (x.data() == nullptr && x.size() > 0) fail(name, "has null data");
  }

  struct named {
    const char* name;
    detail::address_range range;
    const void* data;
    std::vector<index_t> strides;
  };
  template <class V>
  static named entry(const char* name, const V& v) {
    return {name, detail::byte_range(v), v.data(), std::vector<index_t>(v.strides().begin(), v.strides().end())};
  }

  /// Outputs must hold distinct elements and not overlap any input or each other; an output
  /// may be exactly its own initial view (in place).
  void check_memory(const tensor_view<T, 4>& out, const tensor_view<A, 4>* state) {
    std::vector<named> inputs{entry("q", in_.q), entry("k", in_.k), entry("v", in_.v), entry("eta", in_.eta),
                              entry("ln_weight", in_.ln_weight), entry("ln_bias", in_.ln_bias), entry("tau", in_.tau)};
    const named s0 = state ? entry("state", *state) : entry("options.initial_state", opt_.initial_state);
    const named b0 = entry("initial_bias", in_.initial_bias), c0 = entry("initial_cache", in_.initial_cache);
    const named s1 = state ? s0 : entry("options.final_state", opt_.final_state);
    const named b1 = entry("final_bias", in_.final_bias), c1 = entry("final_cache", in_.final_cache);
    if (in_.final_bias.given() && !detail::distinct_elements(in_.final_bias))
      fail("final_bias", "has strides that make distinct elements share memory");
    if (in_.final_cache.given() && !detail::distinct_elements(in_.final_cache))
      fail("final_cache", "has strides that make distinct elements share memory");
    const named outputs[] = {entry("out", out), s1, b1, c1};
    const named initials[] = {s0, b0, c0};
    for (int i = 0; i < 4; ++i) {
      const named& o = outputs[i];
      for (const named& x : inputs)
        if (detail::overlaps(o.range, x.range)) fail(o.name, std::string("overlaps input '") + x.name + "'");
      for (int j = i + 1; j < 4; ++j)
        if (detail::overlaps(o.range, outputs[j].range)) fail(o.name, std::string("overlaps '") + outputs[j].name + "'");
      for (int j = 0; j < 3; ++j) {
        const bool own = i == j + 1 && o.data == initials[j].data && o.strides == initials[j].strides;
        if (!own && detail::overlaps(o.range, initials[j].range))
          fail(o.name, std::string("overlaps '") + initials[j].name + "'; expected the same view (in place) or disjoint memory");
      }
    }
  }

  /// The position entry of every carried cache is an integer in [0, mini_batch).
  void check_positions() {
    const auto& c = in_.initial_cache;
    if (!c.given()) return;
    const index_t D = p_.K;
    for (index_t n = 0; n < p_.N; ++n)
      for (index_t hv = 0; hv < p_.HV; ++hv) {
        const double pos = static_cast<double>(c(n, hv, D + 1, 0));
        if (!(pos >= 0 && pos < double(in_.mini_batch) && pos == std::floor(pos)))
          fail("initial_cache", "holds position " + std::to_string(pos) + " at [" + std::to_string(n) + ", " +
                                    std::to_string(hv) + ", D + 1, 0], expected an integer in [0, mini_batch = " +
                                    std::to_string(in_.mini_batch) + ")");
      }
  }

  template <class V>
  void scan(const char* name, const V& x) {
    if (!x.given()) return;
    detail::for_each_element(x, [&](const auto& val, const auto& idx) {
      if (!std::isfinite(static_cast<double>(val)))
        fail(name, "holds a non-finite value at " + detail::shape_string(idx) + " (options.check_finite)");
    });
  }
  void scan_extras() {
    scan("ln_weight", in_.ln_weight);
    scan("ln_bias", in_.ln_bias);
    scan("tau", in_.tau);
    scan("initial_bias", in_.initial_bias);
    scan("initial_cache", in_.initial_cache);
  }

  detail::form f_;
  const inputs_t& in_;
  const options<A>& opt_;
  detail::call_checker<Rule, T, A> base_;
  detail::problem p_;
};

/// Validates a TTT call and returns its sizes (scale resolved to 1 when unset).
template <class Rule, class T, class A>
detail::problem ttt_check(detail::form f, const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                          const options<A>& opt, const tensor_view<A, 4>* state = nullptr) {
  return ttt_checker<Rule, T, A>(f, in, opt).check(out, state);
}

}  // namespace linattn::cpu
