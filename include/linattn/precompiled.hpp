// SPDX-License-Identifier: MIT
/// \file
/// The CPU entry points compiled once, in the `linattn::precompiled` library (CMake option
/// LINATTN_PRECOMPILED): every rule's forms at float and double, declared here as explicit
/// instantiations. Include this header instead of <linattn/linattn.hpp> and link the library,
/// and a translation unit parses the rules and the entry points' declarations only (no Eigen,
/// no kernels); include it next to <linattn/linattn.hpp> and the calls it lists are still not
/// compiled again. What it covers (docs/design.md#precompiled):
///
///   chunkwise_forward, recurrent_forward, parallel_forward, decode_step   every state-based rule
///   chunkwise_backward, recurrent_backward (grad_out const or not)        every rule with gradients
///   chunkwise_forward, recurrent_forward, parallel_forward                SoftmaxAttention
///   parallel_forward                                                      LocalLinearAttention
///
/// each for T = float and double. Other element types (Eigen::half, Eigen::bfloat16), the KV
/// decode of the softmax rules, the serving calls and the CUDA backend need the full headers.
#pragma once

#include "core/error.hpp"
#include "forms/declarations.hpp"
#include "rules/delta.hpp"
#include "rules/delta_product.hpp"
#include "rules/gated_delta.hpp"
#include "rules/hebbian.hpp"
#include "rules/kda.hpp"
#include "rules/local_linear_attention.hpp"
#include "rules/longhorn.hpp"
#include "rules/longhorn_diagonal.hpp"
#include "rules/mamba.hpp"
#include "rules/mlstm.hpp"
#include "rules/nlms.hpp"
#include "rules/rls.hpp"
#include "rules/rwkv7.hpp"
#include "rules/scalar_decay.hpp"
#include "rules/softmax_attention.hpp"
#include "rules/ttt_linear.hpp"
#include "rules/vector_decay.hpp"

/// X(Rule, T) for each rule of a group (the library compiles one group and type per file).
#define LINATTN_PRECOMPILED_ADDITIVE(X, T) \
  X(linattn::Hebbian, T) X(linattn::ScalarDecay, T) X(linattn::VectorDecay, T) X(linattn::LonghornDiagonal, T)
#define LINATTN_PRECOMPILED_HOUSEHOLDER(X, T) \
  X(linattn::Delta, T) X(linattn::GatedDelta, T) X(linattn::Longhorn, T) X(linattn::NLMS, T) X(linattn::KDA, T)
#define LINATTN_PRECOMPILED_OTHER(X, T)                                                                      \
  X(linattn::DeltaProduct, T) X(linattn::GatedDeltaProduct, T) X(linattn::mLSTM, T) X(linattn::Mamba, T) \
  X(linattn::RWKV7, T) X(linattn::RLS, T) X(linattn::TTTLinear, T)
#define LINATTN_PRECOMPILED_BACKWARD_ADDITIVE(X, T) X(linattn::Hebbian, T) X(linattn::ScalarDecay, T) X(linattn::VectorDecay, T)
#define LINATTN_PRECOMPILED_BACKWARD_HOUSEHOLDER(X, T) \
  X(linattn::Delta, T) X(linattn::GatedDelta, T) X(linattn::Longhorn, T) X(linattn::NLMS, T) X(linattn::KDA, T)

/// One form of (Rule, T) as an explicit instantiation declaration (Extern = extern) or
/// definition (Extern empty).
#define LINATTN_PRECOMPILED_SEQUENCE_FORM(Extern, form, Rule, T)                                  \
  Extern template void linattn::form<Rule, T>(const linattn::inputs_t<Rule, T>&, linattn::tensor_view<T, 4>, \
                                              const linattn::options<linattn::state_t<T>>&);
#define LINATTN_PRECOMPILED_DECODE(Extern, Rule, T)                                                              \
  Extern template void linattn::decode_step<Rule, T>(const linattn::inputs_t<Rule, T>&, linattn::tensor_view<T, 4>, \
                                                     linattn::tensor_view<linattn::state_t<T>, 4>,                  \
                                                     const linattn::options<linattn::state_t<T>>&);
#define LINATTN_PRECOMPILED_BACKWARD_FORM(Extern, form, Rule, G)                                                \
  Extern template void linattn::form<Rule, G>(const linattn::inputs_t<Rule, G>&, linattn::tensor_view<G, 4>,   \
                                              const linattn::gradients_t<Rule, std::remove_const_t<G>>&,       \
                                              const linattn::backward_options<linattn::state_t<std::remove_const_t<G>>>&);

/// Every form of a state-based rule, of a rule's backward pass, of the softmax rules.
#define LINATTN_PRECOMPILED_FORMS(Extern, Rule, T)                \
  LINATTN_PRECOMPILED_SEQUENCE_FORM(Extern, chunkwise_forward, Rule, T) \
  LINATTN_PRECOMPILED_SEQUENCE_FORM(Extern, recurrent_forward, Rule, T) \
  LINATTN_PRECOMPILED_SEQUENCE_FORM(Extern, parallel_forward, Rule, T)  \
  LINATTN_PRECOMPILED_DECODE(Extern, Rule, T)
#define LINATTN_PRECOMPILED_BACKWARD(Extern, Rule, T)                      \
  LINATTN_PRECOMPILED_BACKWARD_FORM(Extern, chunkwise_backward, Rule, T)       \
  LINATTN_PRECOMPILED_BACKWARD_FORM(Extern, chunkwise_backward, Rule, const T) \
  LINATTN_PRECOMPILED_BACKWARD_FORM(Extern, recurrent_backward, Rule, T)       \
  LINATTN_PRECOMPILED_BACKWARD_FORM(Extern, recurrent_backward, Rule, const T)
#define LINATTN_PRECOMPILED_SOFTMAX(Extern, T)                                                    \
  LINATTN_PRECOMPILED_SEQUENCE_FORM(Extern, chunkwise_forward, linattn::SoftmaxAttention, T)       \
  LINATTN_PRECOMPILED_SEQUENCE_FORM(Extern, recurrent_forward, linattn::SoftmaxAttention, T)       \
  LINATTN_PRECOMPILED_SEQUENCE_FORM(Extern, parallel_forward, linattn::SoftmaxAttention, T)        \
  LINATTN_PRECOMPILED_SEQUENCE_FORM(Extern, parallel_forward, linattn::LocalLinearAttention, T)

#define LINATTN_PRECOMPILED_EXTERN(Rule, T) LINATTN_PRECOMPILED_FORMS(extern, Rule, T)
#define LINATTN_PRECOMPILED_DEFINE(Rule, T) LINATTN_PRECOMPILED_FORMS(, Rule, T)
#define LINATTN_PRECOMPILED_BACKWARD_EXTERN(Rule, T) LINATTN_PRECOMPILED_BACKWARD(extern, Rule, T)
#define LINATTN_PRECOMPILED_BACKWARD_DEFINE(Rule, T) LINATTN_PRECOMPILED_BACKWARD(, Rule, T)

LINATTN_PRECOMPILED_ADDITIVE(LINATTN_PRECOMPILED_EXTERN, float)
LINATTN_PRECOMPILED_ADDITIVE(LINATTN_PRECOMPILED_EXTERN, double)
LINATTN_PRECOMPILED_HOUSEHOLDER(LINATTN_PRECOMPILED_EXTERN, float)
LINATTN_PRECOMPILED_HOUSEHOLDER(LINATTN_PRECOMPILED_EXTERN, double)
LINATTN_PRECOMPILED_OTHER(LINATTN_PRECOMPILED_EXTERN, float)
LINATTN_PRECOMPILED_OTHER(LINATTN_PRECOMPILED_EXTERN, double)
LINATTN_PRECOMPILED_BACKWARD_ADDITIVE(LINATTN_PRECOMPILED_BACKWARD_EXTERN, float)
LINATTN_PRECOMPILED_BACKWARD_ADDITIVE(LINATTN_PRECOMPILED_BACKWARD_EXTERN, double)
LINATTN_PRECOMPILED_BACKWARD_HOUSEHOLDER(LINATTN_PRECOMPILED_BACKWARD_EXTERN, float)
LINATTN_PRECOMPILED_BACKWARD_HOUSEHOLDER(LINATTN_PRECOMPILED_BACKWARD_EXTERN, double)
LINATTN_PRECOMPILED_SOFTMAX(extern, float)
LINATTN_PRECOMPILED_SOFTMAX(extern, double)
