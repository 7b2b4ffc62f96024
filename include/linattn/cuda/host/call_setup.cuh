// SPDX-License-Identifier: MIT
/// \file
/// Host side of every CUDA call: the CPU API's validation (same messages, nothing written on
/// failure) and the checks only the device path needs (device memory, supported sizes). The
/// one place that calls linattn::detail::call_checker.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "../../core/backward.hpp"
#include "../../core/options.hpp"
#include "../../core/problem.hpp"
#include "../../core/validate.hpp"
#include "../../core/validate_backward.hpp"
#include "../kernels/call_args.cuh"
#include "status.cuh"

namespace linattn::cuda::detail {

using linattn::detail::form;
using linattn::detail::problem;

/// True when p points into device (or managed) memory (see on_device below; null: false).
inline bool in_device_memory(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // clear the error of an unregistered host pointer
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/// Host copy of options::cu_seqlens (which may live in host or device memory): the offsets are
/// read once per call on the host, to validate them and to build the chunk table. Also copies
/// options::state_indices (validated on the host, then given to the kernels by the plan).
class host_seqlens {
 public:
  explicit host_seqlens(const seqlens_view& cu) {
    if (!cu.given() || cu.null() || cu.size() < 1) {
      view_ = cu;
      return;
    }
    const index_t n = cu.size(), stride = cu.stride();
    if (!in_device_memory(cu.data())) {  // host memory: read it directly (no CUDA call, no synchronisation)
      values_.resize(std::size_t(n));
      for (index_t i = 0; i < n; ++i) values_[std::size_t(i)] = std::int64_t(cu[i]);
      view_ = tensor_view<const std::int64_t, 1>(values_.data(), {n}, {1});
      return;
    }
    const std::size_t width = cu.wide() ? 8 : 4;
    std::vector<unsigned char> raw;
    if (stride > 0) {
      raw.resize(std::size_t((n - 1) * stride + 1) * width);
      check(cudaMemcpy(raw.data(), cu.data(), raw.size(), cudaMemcpyDefault), "cudaMemcpy(cu_seqlens)");
    }
    values_.resize(std::size_t(n));
    for (index_t i = 0; i < n; ++i) {
      const auto* src = static_cast<const unsigned char*>(cu.data()) + std::ptrdiff_t(i * stride) * std::ptrdiff_t(width);
      unsigned char e[8];
      if (stride > 0) std::memcpy(e, raw.data() + std::size_t(i * stride) * width, width);
      else check(cudaMemcpy(e, src, width, cudaMemcpyDefault), "cudaMemcpy(cu_seqlens)");
      if (width == 8) std::memcpy(&values_[std::size_t(i)], e, 8);
      else {
        std::int32_t x;
        std::memcpy(&x, e, 4);
        values_[std::size_t(i)] = x;
      }
    }
    view_ = tensor_view<const std::int64_t, 1>(values_.data(), {n}, {1});
  }
  const seqlens_view& view() const { return view_; }

 private:
  std::vector<std::int64_t> values_;
  seqlens_view view_;
};

/// True when p points into device (or managed) memory.
inline bool on_device(const void* p) {
  return p == nullptr || in_device_memory(p);  // null views are reported by the shape checks
}

/// Every named view (name, data pointer) in device memory.
template <class Fail>
void check_in_device_memory(const Fail& fail, std::initializer_list<std::pair<const char*, const void*>> views) {
  for (const auto& [name, ptr] : views)
    if (!on_device(ptr)) fail(name, "is not in device memory (cudaMalloc'd or managed memory expected)");
}

/// The head sizes the kernels support, K and V in {64, 128}, found in argument `arg`.
template <class Fail>
void check_head_sizes(const Fail& fail, index_t K, index_t V, const char* arg, const char* verb) {
  if (!((K == 64 || K == 128) && (V == 64 || V == 128)))
    fail(arg, std::string(verb) + " K = " + std::to_string(K) + ", V = " + std::to_string(V) +
                  "; the CUDA kernels support K, V in {64, 128}");
}

/// The checks only the device path needs, common to every CUDA call: the head sizes the
/// kernels support, the token count, and device memory for every named view.
template <class Fail>
void check_device_call(const Fail& fail, const problem& p, std::initializer_list<std::pair<const char*, const void*>> views) {
  check_head_sizes(fail, p.K, p.V, "q", "and 'v' give");
  if (p.B * p.T >= (index_t(1) << 31)) fail("q", "has B * T >= 2^31 tokens");
  check_in_device_memory(fail, views);
}

/// Validates a CUDA call: the CPU checks, then device memory and the sizes the kernels
/// support. `state` is decode_step's in-place state. Returns the problem (with its own copy
/// of the offsets). verify_drafts names itself (`fn`) and checks its record (`more(checker)`,
/// call_checker::check; `extra`: the record's views for the device-memory check).
template <class Rule, class T, class More = void (*)(linattn::detail::call_checker<Rule, T, float>&)>
problem validate(form f, const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                 const options<float>& opt, const tensor_view<float, 4>* state, const host_seqlens& cu,
                 More&& more = [](linattn::detail::call_checker<Rule, T, float>&) {}, const std::string& fn = {},
                 std::initializer_list<std::pair<const char*, const void*>> extra = {}) {
  options<float> host_opt = opt;
  host_opt.cu_seqlens = cu.view();
  host_opt.check_finite = false;
  const host_seqlens slots(opt.state_indices);  // read on the host once, to validate them
  host_opt.state_indices = slots.view();
  linattn::detail::call_checker<Rule, T, float> checker(f, in, host_opt, "linattn::cuda::");
  // The overlap checks look at where the caller's lists live (host or device), not at the copies.
  if (opt.cu_seqlens.given() && !opt.cu_seqlens.null())
    checker.cu_seqlens_region(linattn::detail::region_of("options.cu_seqlens", opt.cu_seqlens));
  if (opt.state_indices.given() && !opt.state_indices.null())
    checker.state_indices_region(linattn::detail::region_of("options.state_indices", opt.state_indices));
  if (!fn.empty()) checker.rename(fn);
  problem p = checker.check(out, state, more);
  if (opt.check_finite)
    checker.fail("options.check_finite", "is set; the CUDA backend does not scan device inputs (leave it false)");
  if (f == form::chunkwise && opt.chunk_size != chunk)
    checker.fail("options.chunk_size", "is " + std::to_string(opt.chunk_size) + "; the CUDA chunkwise form uses 64");
  check_device_call([&](const char* a, const std::string& m) { checker.fail(a, m); }, p,
                    {{"q", in.q.data()},
                     {"k", in.k.data()},
                     {"v", in.v.data()},
                     {"out", out.data()},
                     {"state", state ? state->data() : nullptr},
                     {"options.initial_state", opt.initial_state.data()},
                     {"options.final_state", opt.final_state.data()},
                     {"options.checkpoints", opt.checkpoints.data()}});
  check_in_device_memory([&](const char* a, const std::string& m) { checker.fail(a, m); }, extra);
  return p;
}

/// Points a call's kernels at options::checkpoints when the validated call writes them.
template <class Rule, class E>
void with_checkpoints(call_args<Rule, E>& args, const options<float>& opt, const problem& p) {
  if (p.checkpoint_every <= 0) return;
  args.checkpoints = opt.checkpoints;
  args.every = int(p.checkpoint_every);
}

/// Validates a CUDA backward call: the CPU backward's checks (core/validate_backward.hpp),
/// then device memory for every view and the sizes the kernels support.
template <class Rule, class T>
problem validate_backward(const typename Rule::template inputs<T>& in, const tensor_view<const T, 4>& grad_out,
                          const gradients_t<Rule, T>& grads, const backward_options<float>& opt, const host_seqlens& cu) {
  backward_options<float> host_opt = opt;
  host_opt.cu_seqlens = cu.view();
  host_opt.check_finite = false;
  const problem p = linattn::detail::validate_backward<Rule, T, float>(
      form::chunkwise_backward, in, grad_out, grads, host_opt, "linattn::cuda::", [&](auto& checker) {
        if (opt.cu_seqlens.given() && !opt.cu_seqlens.null())
          checker.cu_seqlens_region(linattn::detail::region_of("options.cu_seqlens", opt.cu_seqlens));
      });
  const auto fail = [&](const char* arg, const std::string& msg) {
    throw error(std::string("linattn::cuda::chunkwise_backward<") + Rule::name + ">: argument '" + arg + "' " + msg);
  };
  if (opt.check_finite) fail("options.check_finite", "is set; the CUDA backend does not scan device inputs (leave it false)");
  const void* dbeta = nullptr;
  if constexpr (requires { Rule::beta_gradient(grads); }) dbeta = Rule::beta_gradient(grads).data();
  const void* dg = nullptr;
  if constexpr (requires { grads.dg; }) dg = grads.dg.data();
  check_device_call(fail, p,
                    {{"q", in.q.data()},
                     {"k", in.k.data()},
                     {"v", in.v.data()},
                     {"grad_out", grad_out.data()},
                     {"dq", grads.dq.data()},
                     {"dk", grads.dk.data()},
                     {"dv", grads.dv.data()},
                     {requires { grads.ddelta; } ? "ddelta" : "dbeta", dbeta},
                     {"dg", dg},
                     {"options.initial_state", opt.initial_state.data()},
                     {"options.grad_final_state", opt.grad_final_state.data()},
                     {"options.grad_initial_state", opt.grad_initial_state.data()}});
  return p;
}

}  // namespace linattn::cuda::detail
