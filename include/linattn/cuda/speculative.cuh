// SPDX-License-Identifier: MIT
/// \file
/// `linattn::cuda::verify_drafts<Rule>` and `linattn::cuda::commit_drafts`: speculative
/// decoding over a state pool on the GPU with the compact record (core/draft_record.hpp). The
/// verify step is the token kernel reading each pool slot once and writing no state; the
/// commit step rewrites each committed slot once.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <type_traits>
#include <vector>

#include "../core/commit_checks.hpp"
#include "../core/draft_record.hpp"
#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../core/serving_checks.hpp"
#include "../core/tensor_view.hpp"
#include "host/call_setup.cuh"
#include "host/launch.cuh"
#include "host/qk_normalization.cuh"
#include "host/supported_rule.cuh"
#include "host/workspace_pool.cuh"
#include "kernels/draft_commit.cuh"
#include "recurrent.cuh"
#include "tile/dims.cuh"

namespace linattn::cuda {

/// linattn::verify_drafts with a draft_record, on device memory, queued on `stream`: inputs
/// `[B, T, ...]` (T draft tokens per sequence) or a packed batch (options::cu_seqlens), out
/// `[B, T, HV, V]`, sequence n reading slot options::state_indices[n] of `pool` `[P, HV, K, V]`
/// (fp32; not written). `record` (device memory, fp32) receives each draft token's write and
/// log decay (G = 1 or K). options::state_indices and cu_seqlens may live in host or device
/// memory (read on the host).
template <rule Rule, class T>
void verify_drafts(const std::type_identity_t<typename Rule::template inputs<std::remove_const_t<T>>>& in,
                   tensor_view<T, 4> out, tensor_view<const float, 4> pool, const draft_record<float>& record,
                   const options<float>& opt = {}, cudaStream_t stream = nullptr) {
  using E = std::remove_const_t<T>;
  detail::require_supported<Rule, E>();
  static_assert(linattn::detail::records_drafts<Rule>, "linattn::cuda::verify_drafts: the rule keeps no compact record");
  const std::string fn = std::string("linattn::cuda::verify_drafts<") + Rule::name + ">";
  linattn::detail::check_verify_options(fn, opt, "record");
  options<float> o = opt;
  o.initial_state = pool;
  const detail::host_seqlens cu(opt.cu_seqlens);
  const auto p = detail::validate<Rule, E>(
      detail::form::recurrent, in, out, o, nullptr, cu,
      [&](auto& c) { linattn::detail::check_draft_record<Rule>(c, record, c.sizes().N, c.sizes().max_length()); }, fn,
      {{"record.keys", record.keys.data()},
       {"record.updates", record.updates.data()},
       {"record.log_decay", record.log_decay.data()}});
  const detail::normalized_qk<typename Rule::template inputs<E>> qk(in, opt.normalize_qk, stream);
  detail::token_args<Rule, E> args(qk.inputs(), out, pool, {}, p);
  args.record = record;
  detail::run_tokens(args, p, stream);
}

/// linattn::commit_drafts from a draft_record, on device memory, queued on `stream`: pool
/// `[P, HV, K, V]` (fp32) slot of each sequence <- its state after num_accepted[n] draft
/// tokens. num_accepted, options::state_indices and options::cu_seqlens may live in host or
/// device memory: they are validated on the host (device memory: one copy each, which waits
/// for the work queued before it).
inline void commit_drafts(tensor_view<float, 4> pool, const draft_record<float>& record, integer_list_view num_accepted,
                          const options<float>& opt = {}, cudaStream_t stream = nullptr) {
  const auto fail = [](const std::string& arg, const std::string& msg) {
    throw error("linattn::cuda::commit_drafts: argument '" + arg + "' " + msg);
  };
  linattn::detail::check_record_for_pool(record, pool, fail);
  const detail::host_seqlens accepted(num_accepted), slots(opt.state_indices), cu(opt.cu_seqlens);
  options<float> host_opt;
  host_opt.state_indices = slots.view();
  host_opt.cu_seqlens = cu.view();
  const auto entries = linattn::detail::checked_commit(
      pool, record.keys.extent(0), record.keys.extent(1), accepted.view(), host_opt,
      linattn::detail::commit_reads(linattn::detail::record_regions(record), num_accepted, opt), fail);
  const index_t HV = pool.extent(1), K = pool.extent(2), V = pool.extent(3);
  detail::check_head_sizes(fail, K, V, "pool", "has");
  detail::check_in_device_memory(fail, {{"pool", pool.data()},
                                        {"record.keys", record.keys.data()},
                                        {"record.updates", record.updates.data()},
                                        {"record.log_decay", record.log_decay.data()}});
  if (entries.empty()) return;
  detail::workspace_layout layout;
  const auto table = layout.take<linattn::detail::commit_entry>(entries.size());
  detail::scratch ws(layout.bytes, stream);
  const auto* d_entries = detail::upload(ws, table, entries, stream);
  const dim3 grid(unsigned(entries.size()), unsigned(HV), unsigned(V / 32));
  detail::with_dims(K, V, [&](auto k, auto) {
    detail::draft_commit_kernel<decltype(k)::value>
        <<<grid, 32 * detail::commit_block_warps, 0, stream>>>(pool, record, d_entries);
    detail::check_launch("draft_commit_kernel");
  });
}

}  // namespace linattn::cuda
