// SPDX-License-Identifier: MIT
// TTT-Linear's CPU entry point, `forward_ttt_linear`. Its inputs are not q, k, v plus per-token
// extras (the inner LayerNorm's weight and bias are per head, tau per mini-batch position) and
// its state is three arrays (weights W, bias b, the unfinished mini-batch's cache), so it has a
// call of its own rather than bind_rule's. Forward only: the library has no TTT backward.
#include "../bind_rule.hpp"

namespace linattn::python {

namespace {

/// forward_ttt_linear(form, q, k, v, eta, ln_weight, ln_bias, tau, mini_batch, out,
/// initial_state, final_state, initial_bias, final_bias, initial_cache, final_cache, cu_seqlens,
/// scale, chunk_size, threads, check_finite): form "chunk" (the dual form, chunkwise_forward),
/// "recurrent" (the primal form) or "parallel". Shapes as in rules/ttt_linear.hpp: q, k
/// [B, T, H, D]; v, out [B, T, HV, D]; eta [B, T, HV]; ln_weight, ln_bias [HV, D]; tau [mini_batch];
/// states W [N, HV, D, D], b [N, HV, D], cache [N, HV, D + 2, D].
void forward_ttt(const std::string& form, const array& q, const array& k, const array& v, const array& eta,
                 const array& ln_weight, const array& ln_bias, const maybe_array& tau, long mini_batch,
                 const array& out, const maybe_array& initial_state, const maybe_array& final_state,
                 const maybe_array& initial_bias, const maybe_array& final_bias, const maybe_array& initial_cache,
                 const maybe_array& final_cache, const maybe_array& cu_seqlens, double scale, int chunk_size,
                 int threads, bool check_finite) {
  with_element_type(q, [&]<class T>() {
    using S = state_t<T>;
    constexpr memory host = memory::host;
    TTTLinear::inputs<T> in{};
    in.q = as_view<const T, 4>(q, "q", host);
    in.k = as_view<const T, 4>(k, "k", host);
    in.v = as_view<const T, 4>(v, "v", host);
    in.eta = as_member_view<decltype(in.eta)>(eta, "eta", host);
    in.ln_weight = as_member_view<decltype(in.ln_weight)>(ln_weight, "ln_weight", host);
    in.ln_bias = as_member_view<decltype(in.ln_bias)>(ln_bias, "ln_bias", host);
    in.tau = as_member_view<decltype(in.tau)>(tau, "tau", host);
    in.mini_batch = index_t(mini_batch);
    in.initial_bias = as_view<const S, 3>(initial_bias, "initial_bias", host);
    in.final_bias = as_view<S, 3>(final_bias, "final_bias", host);
    in.initial_cache = as_view<const S, 4>(initial_cache, "initial_cache", host);
    in.final_cache = as_view<S, 4>(final_cache, "final_cache", host);
    auto opt = make_options<S>(scale, false, initial_state, final_state, cu_seqlens, host, host);
    opt.check_finite = check_finite;
    opt.chunk_size = chunk_size;
    opt.threads = threads;
    const auto o = as_view<T, 4>(out, "out", host);
    const nb::gil_scoped_release unlocked;
    if (form == "chunk") chunkwise_forward<TTTLinear>(in, o, opt);
    else if (form == "recurrent") recurrent_forward<TTTLinear>(in, o, opt);
    else if (form == "parallel") parallel_forward<TTTLinear>(in, o, opt);
    else bad_argument("form", "is '" + form + "', expected 'chunk', 'recurrent' or 'parallel'");
  });
}

}  // namespace

void bind_ttt_linear(nb::module_& m) {
  using namespace nb::literals;
  m.def("forward_ttt_linear", &forward_ttt, "form"_a, "q"_a, "k"_a, "v"_a, "eta"_a, "ln_weight"_a, "ln_bias"_a,
        "tau"_a.none(), "mini_batch"_a, "out"_a, "initial_state"_a.none(), "final_state"_a.none(),
        "initial_bias"_a.none(), "final_bias"_a.none(), "initial_cache"_a.none(), "final_cache"_a.none(),
        "cu_seqlens"_a.none(), "scale"_a, "chunk_size"_a, "threads"_a, "check_finite"_a);
}

}  // namespace linattn::python
