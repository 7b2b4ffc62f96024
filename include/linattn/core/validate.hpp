// SPDX-License-Identifier: MIT
/// \file
/// Validation of one call, done once at the entry point for every backend: `validate<Rule>`
/// checks the inputs, options, output and states, lets the rule add its own checks through
/// hooks, and returns the call's sizes (`problem`). Everything is checked before anything is
/// written; each failure throws `linattn::error` naming the argument, what it got and what was
/// expected.
///
/// Hooks a rule may define (all optional):
///   check_inputs(in, c)   register its extra inputs: c.per_token(name, view, range),
///                         c.per_key(name, view, range), c.per_step(name, view, range) (a
///                         Householder product's [B, T, n_h, HV]), c.per_channel(name, view,
///                         range) ([B, T, HV, V], a selective scan's Delta); c.fail(arg, msg)
///   check_call(in, c)     checks that need the validated sizes, options or outputs, run after
///                         the common ones: c.expect(...), c.extra_input(...),
///                         c.extra_output(...), c.sizes(), c.call_form(), c.opts()
///   default_scale(K)      the q scale when options::scale is unset (else 1/sqrt(K))
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "contracts.hpp"
#include "error.hpp"
#include "options.hpp"
#include "problem.hpp"
#include "serving_checks.hpp"
#include "tensor_view.hpp"
#include "view_checks.hpp"
#include "coefficient_view.hpp"

namespace linattn::detail {

/// Last extent of a rule's state `[N, HV, K, cols]`: V for a matrix state S^T, more when the
/// rule carries extra per-key columns (RLS: `Rule::state_columns(K, V)` = V + K).
template <class Rule>
index_t state_columns(index_t K, index_t V) {
  if constexpr (requires { Rule::state_columns(K, V); }) return Rule::state_columns(K, V);
  else return V;
}
template <class Rule>
const char* state_shape_name() {
  if constexpr (requires { Rule::state_shape; }) return Rule::state_shape;
  else return "[N, HV, K, V]";
}

/// Validates one call of `Rule` and returns its sizes.
template <class Rule, class T, class Real>
class call_checker {
 public:
  using inputs_t = typename Rule::template inputs<T>;

  /// `api` prefixes the function name in messages ("linattn::" or "linattn::cuda::").
  call_checker(form f, const inputs_t& in, const options<Real>& opt, const char* api = "linattn::")
      : form_(f), in_(in), opt_(opt), api_(api) {
    inputs_.reserve(16), outputs_.reserve(4);  // one allocation each: decode calls are short
  }

  /// Checks inputs, options, the output and the states; `state` is decode_step's in-place state.
  problem check(const tensor_view<T, 4>& out, const tensor_view<Real, 4>* state = nullptr) {
    return check(out, state, [](call_checker&) {});
  }

  /// The same, with `more(*this)` checking and registering the call's further views (e.g.
  /// verify_drafts's record) once the sizes are known, before the overlap checks.
  template <class More>
  problem check(const tensor_view<T, 4>& out, const tensor_view<Real, 4>* state, More&& more) {
    return checked("out", out, state, [&] {
      outputs_.push_back(region_of("out", out));
      check_options();
      if (state) check_decode_state(*state);
      else check_states();
      check_state_indices(state);
      check_checkpoints();
      more(*this);
    });
  }

  /// The backward pass (core/validate_backward.hpp): `grad_out` `[B, T, HV, V]` is an input
  /// in place of out; `outputs(*this)` checks and registers the gradient views (expect,
  /// extra_input, extra_output) once the sizes are known. Both backward forms take
  /// options::chunk_size (the recurrent one checkpoints its state every chunk) and write no
  /// forward state (options::final_state must be unset).
  template <class Outputs>
  problem check_backward(const tensor_view<const T, 4>& grad_out, Outputs&& outputs) {
    return checked("grad_out", grad_out, nullptr, [&] {
      extra_input("grad_out", grad_out);
      if (opt_.final_state.given())
        fail("options.final_state", "is set, expected none: the backward pass writes gradients only (options.grad_initial_state)");
      if (opt_.state_indices.given())
        fail("options.state_indices", "is set, expected none: the backward pass reads options.initial_state per sequence");
      if (opt_.checkpoint_every != 0 || opt_.checkpoints.given())
        fail("options.checkpoints", "is set, expected none (and checkpoint_every = 0): the backward pass writes gradients only");
      check_options();
      check_states();
      outputs(*this);
    });
  }

  // ---- hooks for Rule::check_inputs ----------------------------------------------------

  /// A per-token scalar input of shape [B, T, HV] (g, beta, delta, eta, ...).
  void per_token(const char* name, const coefficient_view<T, 3>& x, value_range range) {
    coefficient(name, x, range, std::array<index_t, 3>{p_.B, p_.T, p_.HV}, "[B, T, HV]");
  }
  /// A per-token, per-key input of shape [B, T, HV, K] (vector gates).
  void per_key(const char* name, const coefficient_view<T, 4>& x, value_range range) {
    coefficient(name, x, range, std::array<index_t, 4>{p_.B, p_.T, p_.HV, p_.K}, "[B, T, HV, K]");
  }
  /// A per-token, per-channel input of shape [B, T, HV, V] (a selective scan's Delta, z);
  /// `required` false: a missing view passes.
  void per_channel(const char* name, const coefficient_view<T, 4>& x, value_range range, bool required = true) {
    coefficient(name, x, range, std::array<index_t, 4>{p_.B, p_.T, p_.HV, p_.V}, "[B, T, HV, V]", required);
  }
  /// A per-sub-step scalar input of shape [B, T, n_h, HV] (a Householder product's beta).
  void per_step(const char* name, const coefficient_view<T, 4>& x, value_range range) {
    coefficient(name, x, range, std::array<index_t, 4>{p_.B, p_.T, p_.steps, p_.HV}, "[B, T, n_h, HV]");
  }

  // ---- hooks for Rule::check_call --------------------------------------------------------

  form call_form() const { return form_; }
  const options<Real>& opts() const { return opt_; }
  const problem& sizes() const { return p_; }
  /// Checks a view's shape (and that it has data); a missing optional view passes.
  template <class V, std::size_t R>
  void expect(const char* name, const V& x, const std::array<index_t, R>& want, const char* symbolic,
              bool required = true) {
    if (!x.given()) {
      if (!required) return;
      fail(name, "is missing; expected a view of shape " + std::string(symbolic) + " = " + shape_string(want));
    }
    if (x.extents() != want)
      fail(name, "has shape " + shape_string(x.extents()) + ", expected " + symbolic + " = " + shape_string(want));
    check_reach(name, x);
    if (x.data() == nullptr && x.size() > 0) fail(name, "has null data");
  }
  /// Rejects a view whose element count or address reach overflows the index type.
  template <class V>
  void check_reach(const char* name, const V& x) {
    if (!fits_index(x))
      fail(name, "has shape " + shape_string(x.extents()) + " and strides " + shape_string(x.strides()) +
                     " whose element count or address reach overflows a 64-bit index");
  }
  /// A read-only view the call's outputs must not overlap; scanned by check_finite.
  template <class V>
  void extra_input(const char* name, const V& x) {
    if (!x.given()) return;
    inputs_.push_back(region_of(name, x));
    scans_.push_back([this, name, x] { scan(name, x, value_range::any); });
  }
  /// A read-only per-sequence view that a state pool indexes by slot like the state
  /// (options::state_indices; without one, slot = sequence): check_finite scans only the
  /// slots this call reads.
  template <class V>
  void pool_input(const char* name, const V& x) {
    if (!x.given()) return;
    inputs_.push_back(region_of(name, x));
    scans_.push_back([this, name, x] { scan_state(name, x); });
  }
  /// An output view; `initial` is the input it may replace in place (the same view exactly).
  template <class V, class I>
  void extra_output(const char* name, const V& x, const I& initial, const char* initial_name) {
    if (!x.given()) return;
    outputs_.push_back(region_of(name, x));
    if (initial.given()) partners_.push_back({name, initial_name});
  }

  /// Where the caller's offsets live, when options::cu_seqlens is a host copy of them (a
  /// backend that reads device-memory offsets on the host), for the overlap checks.
  void cu_seqlens_region(const memory_region& r) { cu_region_ = r; }
  /// The same for options::state_indices.
  void state_indices_region(const memory_region& r) { slots_region_ = r; }

  /// Names the call in messages `fn` (e.g. "linattn::verify_drafts<GatedDelta>") instead of
  /// its form's entry point.
  void rename(std::string fn) { fn_ = std::move(fn); }

  /// Throws `linattn::error` with the function name and argument prefixed.
  [[noreturn]] void fail(const std::string& arg, const std::string& msg) const {
    const std::string fn = fn_.empty() ? std::string(api_) + form_name(form_) + "<" + Rule::name + ">" : fn_;
    throw error(fn + ": argument '" + arg + "' " + msg);
  }

 private:
  /// Every call's checks around the form's own (`middle`).
  template <class Middle>
  problem checked(const char* first, const tensor_view<const T, 4>& out, const tensor_view<Real, 4>* state,
                  Middle&& middle) {
    check_qkv();
    if constexpr (requires { Rule::check_inputs(in_, *this); }) Rule::check_inputs(in_, *this);
    expect(first, out, std::array<index_t, 4>{p_.B, p_.T, p_.HV, p_.V}, "[B, T, HV, V]");
    middle();
    if constexpr (requires { Rule::check_call(in_, *this); }) Rule::check_call(in_, *this);
    check_memory();
    if (opt_.check_finite) scan_inputs(state);
    return p_;
  }

  template <class V, std::size_t R>
  void coefficient(const char* name, const V& x, value_range range, const std::array<index_t, R>& want,
                   const char* symbolic, bool required = true) {
    expect(name, x, want, symbolic, required);
    if (!x.given()) return;
    inputs_.push_back(region_of(name, x));
    scans_.push_back([this, name, x, range] { scan(name, x, range); });
  }

  void check_qkv() {
    const auto& q = in_.q;
    if (!q.given()) fail("q", "is missing; expected a view of shape [B, T, H, K]");
    for (int d = 0; d < 4; ++d)
      if (q.extent(d) < 0) fail("q", "has a negative extent: shape " + shape_string(q.extents()));
    check_reach("q", q);
    p_.B = q.extent(0), p_.T = q.extent(1), p_.H = q.extent(2), p_.K = q.extent(3);
    if (p_.B < 1 || p_.H < 1 || p_.K < 1)
      fail("q", "has shape " + shape_string(q.extents()) + ", expected [B, T, H, K] with B, H, K >= 1");
    if (q.data() == nullptr && q.size() > 0) fail("q", "has null data");
    const auto& v = in_.v;
    constexpr int at = std::remove_cvref_t<decltype(v)>::rank - 2;  // v's HV axis: 2, or 3 after n_h
    if constexpr (at == 3) {
      check_steps();
    } else {
      expect("k", in_.k, q.extents(), "[B, T, H, K] (the shape of q)");
      if (!v.given()) fail("v", "is missing; expected a view of shape [B, T, HV, V]");
      if (v.extent(0) != p_.B || v.extent(1) != p_.T || v.extent(2) < 1 || v.extent(3) < 1)
        fail("v", "has shape " + shape_string(v.extents()) + ", expected [B, T, HV, V] = [" +
                      std::to_string(p_.B) + ", " + std::to_string(p_.T) + ", HV, V] with HV, V >= 1 (B, T from q)");
    }
    check_reach("v", v);
    p_.HV = v.extent(at), p_.V = v.extent(at + 1);
    if (p_.HV % p_.H != 0)
      fail("v", "has HV = " + std::to_string(p_.HV) + " value heads, expected a multiple of H = " +
                    std::to_string(p_.H) + " (the q/k heads)");
    if (v.data() == nullptr && v.size() > 0) fail("v", "has null data");
    p_.group = p_.HV / p_.H;
    inputs_.push_back(region_of("q", in_.q));
    inputs_.push_back(region_of("k", in_.k));
    inputs_.push_back(region_of("v", in_.v));
  }

  /// Householder products: k [B, T, n_h, H, K] and v [B, T, n_h, HV, V], n_h >= 1 from k.
  void check_steps() {
    const auto& k = in_.k;
    const auto& v = in_.v;
    if (!k.given()) fail("k", "is missing; expected a view of shape [B, T, n_h, H, K]");
    p_.steps = k.extent(2);
    if (p_.steps < 1)
      fail("k", "has shape " + shape_string(k.extents()) + ", expected [B, T, n_h, H, K] with n_h >= 1 (Householder steps per token)");
    expect("k", k, std::array<index_t, 5>{p_.B, p_.T, p_.steps, p_.H, p_.K}, "[B, T, n_h, H, K] (B, T, H, K from q)");
    if (!v.given()) fail("v", "is missing; expected a view of shape [B, T, n_h, HV, V]");
    if (v.extent(0) != p_.B || v.extent(1) != p_.T || v.extent(2) != p_.steps || v.extent(3) < 1 || v.extent(4) < 1)
      fail("v", "has shape " + shape_string(v.extents()) + ", expected [B, T, n_h, HV, V] = [" + std::to_string(p_.B) + ", " +
                    std::to_string(p_.T) + ", " + std::to_string(p_.steps) +
                    ", HV, V] with HV, V >= 1 (B, T from q, n_h from k)");
  }

  void check_options() {
    if (opt_.scale && !(std::isfinite(*opt_.scale) && std::isfinite(static_cast<Real>(*opt_.scale))))
      fail("options.scale", "is " + std::to_string(*opt_.scale) + ", expected a finite number (in the state type, " +
                                (sizeof(Real) == 4 ? "float" : "double") + ")");
    if constexpr (requires { Rule::default_scale(p_.K); }) p_.scale = opt_.scale ? *opt_.scale : Rule::default_scale(p_.K);
    else p_.scale = opt_.scale ? *opt_.scale : 1.0 / std::sqrt(static_cast<double>(p_.K));
    if ((form_ == form::chunkwise || !forward_form(form_)) && (opt_.chunk_size < 1 || opt_.chunk_size > max_chunk_size))
      fail("options.chunk_size", "is " + std::to_string(opt_.chunk_size) + ", expected 1.." + std::to_string(max_chunk_size));
    p_.chunk = opt_.chunk_size;
    if (opt_.threads < 0) fail("options.threads", "is " + std::to_string(opt_.threads) + ", expected >= 0 (0 = all cores)");
    p_.threads = resolved_threads(opt_.threads);
    p_.N = p_.B;
    if (!opt_.cu_seqlens.given()) return;
    if (form_ == form::decode) fail("options.cu_seqlens", "is set, expected none: decode_step takes one token per sequence, sequences are the B axis");
    if (opt_.cu_seqlens.null()) fail("options.cu_seqlens", "has null data");
    if (p_.B != 1) fail("options.cu_seqlens", "is set while q has B = " + std::to_string(p_.B) + ", expected B == 1 (packed batch)");
    inputs_.push_back(cu_region_ ? *cu_region_ : region_of("options.cu_seqlens", opt_.cu_seqlens));
    p_.cu = sequence_offsets(opt_.cu_seqlens);  // the one read of the caller's offsets
    const sequence_offsets& cu = p_.cu;
    if (cu.size() < 2) fail("options.cu_seqlens", "has " + std::to_string(cu.size()) + " entries, expected N + 1 >= 2 offsets");
    if (cu[0] != 0) fail("options.cu_seqlens", "starts at " + std::to_string(cu[0]) + ", expected 0");
    for (index_t i = 1; i < cu.size(); ++i)
      if (cu[i] < cu[i - 1])
        fail("options.cu_seqlens", "is not sorted: entry " + std::to_string(i) + " = " + std::to_string(cu[i]) +
                                       " < entry " + std::to_string(i - 1) + " = " + std::to_string(cu[i - 1]));
    if (cu[cu.size() - 1] != p_.T)
      fail("options.cu_seqlens", "ends at " + std::to_string(cu[cu.size() - 1]) + ", expected T = " + std::to_string(p_.T));
    p_.N = cu.size() - 1;
  }

  /// [N, HV, K, cols], or [P, HV, K, cols] for a pool (options::state_indices: any P).
  template <class V>
  std::array<index_t, 4> state_shape(const V& s) const {
    const index_t first = opt_.state_indices.given() ? s.extent(0) : p_.N;
    return {first, p_.HV, p_.K, state_columns<Rule>(p_.K, p_.V)};
  }
  const char* state_shape_text() const {
    return opt_.state_indices.given() ? "[P, HV, K, V] (a pool of P slots: options.state_indices)" : state_shape_name<Rule>();
  }

  void check_states() {
    const auto& s0 = opt_.initial_state;
    const auto& s1 = opt_.final_state;
    if constexpr (!family_has_state<typename Rule::family>) {
      const char* why = "is set, expected none: this rule has no recurrent state (softmax attention decodes over a kv_cache)";
      if (s0.given()) fail("options.initial_state", why);
      if (s1.given()) fail("options.final_state", why);
      return;
    }
    if (s0.given()) {
      expect("options.initial_state", s0, state_shape(s0), state_shape_text());
      inputs_.push_back(region_of("options.initial_state", s0));
    }
    if (!s1.given()) return;
    expect("options.final_state", s1, state_shape(s1), state_shape_text());
    extra_output("options.final_state", s1, s0, "options.initial_state");
  }

  void check_decode_state(const tensor_view<Real, 4>& s) {
    if (opt_.initial_state.given()) fail("options.initial_state", "is set, expected none: decode_step reads and writes its 'state' argument");
    if (opt_.final_state.given()) fail("options.final_state", "is set, expected none: decode_step reads and writes its 'state' argument");
    expect("state", s, state_shape(s), state_shape_text());
    outputs_.push_back(region_of("state", s));
  }

  /// options::state_indices: N slots of the pool views (decode_step: its `state`; prefill: the
  /// state views given, the smallest pool bounding the slots).
  void check_state_indices(const tensor_view<Real, 4>* state) {
    const auto& idx = opt_.state_indices;
    if (!idx.given()) return;
    if constexpr (!family_has_state_pool<typename Rule::family>) {
      fail("options.state_indices", std::string("is set, expected none: ") + Rule::name +
                                        " has no pooled state (pools hold rules whose state is one [N, HV, K, V] view)");
    } else {
      index_t P = 0;
      std::string pool;
      auto bound = [&](const char* name, index_t slots) {
        if (pool.empty() || slots < P) P = slots, pool = std::string("'") + name + "'";
      };
      if (state) bound("state", state->extent(0));
      if (opt_.initial_state.given()) bound("options.initial_state", opt_.initial_state.extent(0));
      if (opt_.final_state.given()) bound("options.final_state", opt_.final_state.extent(0));
      if (pool.empty())
        fail("options.state_indices", "is set but no state view is, expected options.initial_state and/or "
                                      "options.final_state as the pool [P, HV, K, V]");
      inputs_.push_back(slots_region_ ? *slots_region_ : region_of("options.state_indices", idx));
      p_.slots = checked_slots(idx, "options.state_indices", p_.N, P, pool,
                               [this](const char* a, const std::string& m) { fail(a, m); });
    }
  }

  /// options::checkpoint_every and options::checkpoints `[N, ceil(L / every), HV, K, V]`.
  void check_checkpoints() {
    const index_t every = opt_.checkpoint_every;
    const auto& cp = opt_.checkpoints;
    if (every == 0 && !cp.given()) return;
    if constexpr (!family_has_checkpoints<typename Rule::family>) {
      fail("options.checkpoints", std::string("is set, expected none: ") + Rule::name + " writes no checkpoints");
    } else {
      if (every < 0) fail("options.checkpoint_every", "is " + std::to_string(every) + ", expected >= 0 (0 = no checkpoints)");
      if (every == 0) fail("options.checkpoints", "is set while options.checkpoint_every = 0, expected a checkpoint interval >= 1");
      if (form_ == form::parallel)
        fail("options.checkpoints", "is set, expected none: parallel_forward has no intermediate states (use chunkwise_forward)");
      if (form_ == form::chunkwise && every % p_.chunk != 0)
        fail("options.checkpoint_every", "is " + std::to_string(every) + ", expected a multiple of options.chunk_size = " +
                                             std::to_string(p_.chunk) + " (checkpoints fall on chunk ends)");
      const index_t J = checkpoint_entries(p_.max_length(), every);
      expect("options.checkpoints", cp, std::array<index_t, 5>{p_.N, J, p_.HV, p_.K, state_columns<Rule>(p_.K, p_.V)},
             p_.cu.given() ? "[N, ceil(L / checkpoint_every), HV, K, V] (L: the longest packed sequence)"
                           : "[N, ceil(T / checkpoint_every), HV, K, V]");
      outputs_.push_back(region_of("options.checkpoints", cp));
      p_.checkpoint_every = every;
    }
  }

  /// Outputs hold distinct elements, overlap no input and no other output; an output may be
  /// exactly the input it replaces in place (final_state = initial_state, ...).
  void check_memory() {
    for (std::size_t i = 0; i < outputs_.size(); ++i) {
      const memory_region& o = outputs_[i];
      if (!o.distinct())
        fail(o.name, "has strides " + o.stride_string() + " that make distinct elements share memory");
      for (std::size_t j = 0; j < i; ++j)
        if (overlaps(o, outputs_[j])) fail(o.name, std::string("overlaps '") + outputs_[j].name + "'");
      for (const memory_region& x : inputs_) {
        if (!overlaps(o, x)) continue;
        if (!partners(o.name, x.name)) fail(o.name, std::string("overlaps input '") + x.name + "'");
        if (!o.same_elements(x))
          fail(o.name, std::string("partly overlaps ") + x.name + "; expected the same view (in place) or disjoint memory");
      }
    }
  }
  bool partners(const char* output, const char* input) const {
    for (const auto& [o, i] : partners_)
      if (std::string(o) == output && std::string(i) == input) return true;
    return false;
  }

  template <class V>
  void scan(const char* name, const V& x, value_range range) {
    for_each_element(x, [&](const auto& val, const auto& idx) {
      const double d = static_cast<double>(val);
      if (!std::isfinite(d)) fail(name, "holds a non-finite value (" + std::to_string(d) + ") at " + shape_string(idx) + " (options.check_finite)");
      if (range == value_range::log_gate && d > 0.0)
        fail(name, "holds a positive log gate (" + std::to_string(d) + ") at " + shape_string(idx) + ", expected <= 0 (options.check_finite)");
      if (range == value_range::nonnegative && d < 0.0)
        fail(name, "holds a negative value (" + std::to_string(d) + ") at " + shape_string(idx) + ", expected >= 0 (options.check_finite)");
    });
  }

  /// The delta update S += beta (v - S k) k^T contracts only while beta ||k||^2 <= 2: beyond
  /// that the recurrence itself diverges geometrically (keys not L2-normalised, the usual
  /// cause). Rules whose beta bounds it (Longhorn, NLMS) always pass; with
  /// options::normalize_qk the bound is checked on the normalised key.
  /// (A Householder product: every sub-step j, at [b, t, j, value head].)
  void scan_write_strength() {
    const auto& k = in_.k;
    constexpr bool product = std::is_same_v<typename Rule::family, householder_product_family>;
    for (index_t b = 0; b < p_.B; ++b)
      for (index_t t = 0; t < p_.T; ++t)
        for (index_t j = 0; j < p_.steps; ++j)
          for (index_t hv = 0; hv < p_.HV; ++hv) {
            double kk = 0;
            for (index_t d = 0; d < p_.K; ++d) {
              double x;
              if constexpr (product) x = static_cast<double>(k(b, t, j, p_.qk_head(hv), d));
              else x = static_cast<double>(k(b, t, p_.qk_head(hv), d));
              kk += x * x;
            }
            if (opt_.normalize_qk) kk /= kk + qk_norm_epsilon;  // the key the rule will see
            double w;
            if constexpr (product) w = Rule::beta(in_, b, t, j, hv, kk) * kk;
            else w = Rule::template beta<T, double>(in_, b, t, hv, kk) * kk;
            if (w > 2.0 * (1.0 + 1e-5))
              fail("k", "gives beta ||k||^2 = " + std::to_string(w) + " > 2 at " +
                            (product ? "sub-step " + shape_string(std::array<index_t, 4>{b, t, j, hv}) + " ([b, t, j, value head])"
                                     : "token " + shape_string(std::array<index_t, 3>{b, t, hv}) + " ([b, t, value head])") +
                            ": the delta update diverges there; L2-normalise the keys (options.check_finite)");
          }
  }

  void scan_inputs(const tensor_view<Real, 4>* state) {
    scan("q", in_.q, value_range::any);
    scan("k", in_.k, value_range::any);
    scan("v", in_.v, value_range::any);
    for (auto& s : scans_) s();
    if constexpr (std::is_same_v<typename Rule::family, householder_family> ||
                  std::is_same_v<typename Rule::family, householder_product_family>)
      scan_write_strength();
    if (state) scan_state("state", *state);
    else if (opt_.initial_state.given()) scan_state("options.initial_state", opt_.initial_state);
  }

  /// A state view, or with a pool only the slots this call reads (the others may hold anything).
  template <class S, int R>
  void scan_state(const char* name, const tensor_view<S, R>& s) {
    if (!p_.slots.given()) return scan(name, s, value_range::any);
    std::array<index_t, R - 1> extents{}, strides{};
    for (int d = 1; d < R; ++d) extents[d - 1] = s.extent(d), strides[d - 1] = s.stride(d);
    for (index_t n = 0; n < p_.N; ++n) {
      if (p_.slot(n) < 0) continue;
      scan(name, tensor_view<S, R - 1>(s.data() + p_.slot(n) * s.stride(0), extents, strides), value_range::any);
    }
  }

  form form_;
  const inputs_t& in_;
  const options<Real>& opt_;
  const char* api_;  // "linattn::" or "linattn::cuda::"
  std::string fn_;   // the name given by rename(), else empty (the form's entry point)
  problem p_;
  std::vector<std::function<void()>> scans_;  // check_finite passes over the rule's inputs
  std::vector<memory_region> inputs_;         // read-only views
  std::vector<memory_region> outputs_;        // written views, in the order they are named
  std::vector<std::pair<const char*, const char*>> partners_;  // (output, the input it may replace)
  std::optional<memory_region> cu_region_;                    // see cu_seqlens_region
  std::optional<memory_region> slots_region_;                 // see state_indices_region
};

/// Validates a call of `Rule` (form `f`; `state`: decode_step's in-place state) and returns
/// its sizes. (The entry points check the rule's contract at compile time: meets_contract.)
template <class Rule, class T, class Real>
problem validate(form f, const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                 const options<Real>& opt, const tensor_view<Real, 4>* state = nullptr,
                 const char* api = "linattn::") {
  return call_checker<Rule, T, Real>(f, in, opt, api).check(out, state);
}

}  // namespace linattn::detail
