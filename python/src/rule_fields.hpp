// SPDX-License-Identifier: MIT
/// \file
/// What each rule takes beyond q, k, v, as member pointers into its `inputs<T>` and
/// `gradients<T>`: the binding fills them generically (bind_rule.hpp), in the order Python
/// passes them (linattn/torch/_rules.py keeps the same order).
#pragma once

#include <linattn/rules/delta.hpp>
#include <linattn/rules/gated_delta.hpp>
#include <linattn/rules/hebbian.hpp>
#include <linattn/rules/kda.hpp>
#include <linattn/rules/longhorn.hpp>
#include <linattn/rules/nlms.hpp>
#include <linattn/rules/rls.hpp>
#include <linattn/rules/scalar_decay.hpp>
#include <linattn/rules/vector_decay.hpp>

#include <tuple>

namespace linattn::python {

/// An extra view of Rule::inputs<T>, by name (the name Python users pass it under).
template <class Member>
struct field {
  const char* name;
  Member member;
};
template <class M>
field(const char*, M) -> field<M>;

/// fields<Rule>::inputs<T>(): the extra views; gradients<T>(): their gradients, same order;
/// number<T>(): the rule's scalar parameter (eps_k, delta) or nullptr.
template <class Rule>
struct fields;

template <>
struct fields<Hebbian> {
  template <class T> static constexpr auto inputs() { return std::tuple{}; }
  template <class T> static constexpr auto gradients() { return std::tuple{}; }
  template <class T> static constexpr auto number() { return nullptr; }
};

template <>
struct fields<ScalarDecay> {
  template <class T> static constexpr auto inputs() { return std::tuple{field{"g", &ScalarDecay::inputs<T>::g}}; }
  template <class T> static constexpr auto gradients() { return std::tuple{field{"dg", &ScalarDecay::gradients<T>::dg}}; }
  template <class T> static constexpr auto number() { return nullptr; }
};

template <>
struct fields<VectorDecay> {
  template <class T> static constexpr auto inputs() { return std::tuple{field{"g", &VectorDecay::inputs<T>::g}}; }
  template <class T> static constexpr auto gradients() { return std::tuple{field{"dg", &VectorDecay::gradients<T>::dg}}; }
  template <class T> static constexpr auto number() { return nullptr; }
};

template <>
struct fields<Delta> {
  template <class T> static constexpr auto inputs() { return std::tuple{field{"beta", &Delta::inputs<T>::beta}}; }
  template <class T> static constexpr auto gradients() { return std::tuple{field{"dbeta", &Delta::gradients<T>::dbeta}}; }
  template <class T> static constexpr auto number() { return nullptr; }
};

template <>
struct fields<GatedDelta> {
  template <class T>
  static constexpr auto inputs() {
    return std::tuple{field{"g", &GatedDelta::inputs<T>::g}, field{"beta", &GatedDelta::inputs<T>::beta}};
  }
  template <class T>
  static constexpr auto gradients() {
    return std::tuple{field{"dg", &GatedDelta::gradients<T>::dg}, field{"dbeta", &GatedDelta::gradients<T>::dbeta}};
  }
  template <class T> static constexpr auto number() { return nullptr; }
};

template <>
struct fields<Longhorn> {
  template <class T> static constexpr auto inputs() { return std::tuple{field{"delta", &Longhorn::inputs<T>::delta}}; }
  template <class T> static constexpr auto gradients() { return std::tuple{field{"ddelta", &Longhorn::gradients<T>::ddelta}}; }
  template <class T> static constexpr auto number() { return nullptr; }
};

template <>
struct fields<NLMS> {
  template <class T> static constexpr auto inputs() { return std::tuple{}; }
  template <class T> static constexpr auto gradients() { return std::tuple{}; }
  template <class T> static constexpr auto number() { return field{"eps_k", &NLMS::inputs<T>::eps_k}; }
};

/// Per-key log gates and beta.
template <>
struct fields<KDA> {
  template <class T>
  static constexpr auto inputs() {
    return std::tuple{field{"g", &KDA::inputs<T>::g}, field{"beta", &KDA::inputs<T>::beta}};
  }
  template <class T>
  static constexpr auto gradients() {
    return std::tuple{field{"dg", &KDA::gradients<T>::dg}, field{"dbeta", &KDA::gradients<T>::dbeta}};
  }
  template <class T> static constexpr auto number() { return nullptr; }
};

/// Forward only (no backward in the library): the log forgetting factor is optional.
template <>
struct fields<RLS> {
  template <class T> static constexpr auto inputs() { return std::tuple{field{"g", &RLS::inputs<T>::g}}; }
  template <class T> static constexpr auto number() { return field{"delta", &RLS::inputs<T>::delta}; }
};

}  // namespace linattn::python
