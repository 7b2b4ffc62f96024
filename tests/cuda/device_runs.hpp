// SPDX-License-Identifier: MIT
/// \file
/// Host-side entry points into the CUDA backend for the tests: each runs one form of one rule
/// on the GPU for a float64 test problem, converted to the chosen input type, and returns the
/// outputs and final states in float64. (Kept apart so that Catch2 and Eigen stay out of nvcc.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../support/reference.hpp"

namespace cuda_tests {

enum class dtype { f32, f16, bf16 };
enum class form { recurrent, chunkwise, decode };

inline const char* name(dtype t) { return t == dtype::f32 ? "float" : t == dtype::f16 ? "half" : "bfloat16"; }
inline const char* name(form f) {
  return f == form::recurrent ? "recurrent" : f == form::chunkwise ? "chunkwise" : "decode";
}

/// How the call is made.
struct config {
  bool use_s0 = true;        // pass the problem's s0 as initial state (decode: as the state)
  bool want_state = true;    // ask for the final state
  bool head_first = false;   // q, k, v, out stored [B, H, T, D] (strided views)
  bool cu_on_device = true;  // cu_seqlens in device memory (else host memory)
  bool through_pool = false; // states in a pool of N + 2 slots, sequence n in slot N + 1 - n
                             // (options::state_indices, the pool in place)
  bool slots_on_host = false;  // through_pool: state_indices in host memory (else device memory)
  bool float_coefficients = false;  // gates, betas (and their gradients) in float whatever the
                                    // input type: fla's mixed precision (bf16 q, k, v; fp32 g, beta)
  bool normalize_qk = false;  // options::normalize_qk (the reference normalises when p.normalize_qk)
  bool tf32 = false;  // options::precision = tf32 (float inputs, chunkwise: one TF32 product per step)
};

struct outcome {
  std::vector<double> o;  // [B, T, HV, V]
  std::vector<double> s;  // [N, HV, K, V] (empty unless asked for)
  bool out_all_written = true;  // no NaN left from the poison
  bool pool_others_untouched = true;  // through_pool: the two slots no sequence uses kept their bits
};

/// True when a CUDA device is usable; otherwise `why` says what the runtime answered.
bool device_present(std::string& why);

/// Multiprocessors of the current device, as the kernels' plans count them to choose grids.
int multiprocessors();

/// The current device's compute capability, major version (9 for H100 and H200).
int compute_capability_major();

/// linattn::cuda::detail::bulk_copies_compiled() in the program's own build: whether its
/// kernels were compiled for sm_90 or later, so that the warp-specialised state pass can run.
bool bulk_copies_compiled();

/// Rounds the problem's inputs (q, k, v, gates, beta) to `t`, so that the float64 reference
/// sees exactly the values the device reads (gates and beta to float when `float_coefficients`).
void round_inputs(ref::problem& p, dtype t, bool float_coefficients = false);

/// Runs `Rule` in form `f` on the device. decode runs the problem's T tokens as T
/// successive decode_step calls of one token each.
template <class Rule>
outcome run(const ref::problem& p, dtype t, form f, const config& c);

/// Speculative decoding on the device (linattn::cuda::verify_drafts with a draft_record, then
/// commit_drafts): the problem's tokens are the draft tokens, sequence n starts from slot
/// N + 1 - n of a pool of N + 2 slots holding the problem's s0 (slots 0 and 1 hold 7.0), and
/// commits accepted[n] of its tokens (num_accepted in device memory when `on_device`, else
/// host memory). `per_key` records G = K decays per token instead of 1.
struct draft_outcome {
  std::vector<double> o;   // [B, T, HV, V] the verify outputs
  std::vector<double> s;   // [N, HV, K, V] each sequence's slot after the commit
  bool pool_kept = true;   // verify left every slot's bits as they were
  bool others_untouched = true;  // slots 0 and 1 kept their bits through both calls
  bool out_all_written = true;
};
template <class Rule>
draft_outcome run_drafts(const ref::problem& p, dtype t, const std::vector<std::int64_t>& accepted, bool on_device,
                         bool per_key);

/// recurrent_forward<Rule> or chunkwise_forward<Rule> (form `f`) with options::checkpoints every
/// `every` tokens (from the problem's s0): the `[N, ceil(L / every), HV, K, V]` checkpoints,
/// NaN where nothing was written.
template <class Rule>
std::vector<double> run_checkpoints(const ref::problem& p, dtype t, int every, form f);

/// Prefix caching on the device: chunkwise_forward<Rule> over a dense batch (from s0) writes
/// checkpoints every `every` tokens, then a second call starts from checkpoint `entry` on the
/// tokens after it. True when that call's outputs and final states equal, bit for bit, those
/// of the uninterrupted run.
template <class Rule>
bool resume_matches(const ref::problem& p, dtype t, int every, int entry);

/// Calls chunkwise_forward<Rule> with a deliberately bad argument and returns the message of
/// the linattn::error it throws (empty if none): "host_pointer", "head_size", "chunk_size".
template <class Rule>
std::string bad_call(const char* what);

/// Gradients of a chunkwise_backward call, in float64 (row-major logical order).
struct backward_outcome {
  std::vector<double> dq, dk, dv, dg, dbeta, ds0;  // dg, dbeta: empty when the rule has none
  bool all_written = true;                         // no NaN left from the poison
};

/// Rounds x to the input type `t` (float for f32).
void round_values(std::vector<double>& x, dtype t);

/// Runs linattn::cuda::chunkwise_backward<Rule> on the device with grad_out `dout`
/// ([B, T, HV, V], in the input type) and grad_final_state `ds1` (fp32; empty: none); the
/// problem's s0 is the initial state (empty: none). dL/d(initial state) is asked for.
template <class Rule>
backward_outcome run_backward(const ref::problem& p, const std::vector<double>& dout, const std::vector<double>& ds1,
                              dtype t, const config& c);

/// Calls chunkwise_backward<Rule> with a gradient view in host memory ("host_dq") or of the
/// wrong shape ("dv_shape") and returns the message of the linattn::error (empty if none).
template <class Rule>
std::string bad_backward_call(const char* what);

/// linattn::cuda::trim_workspace(), after a device synchronisation.
void trim_workspace();

/// chunkwise_forward<GatedDelta> (bf16) from the library's pool, then again with a counting
/// caller allocator installed (linattn::cuda::set_workspace_allocator; the previous one is put
/// back). True when both give the same bits, the caller's allocator served the workspace (at
/// least one allocation, and as many releases), and an allocator without `release` is refused.
bool caller_allocator_serves(const ref::problem& p);

}  // namespace cuda_tests
