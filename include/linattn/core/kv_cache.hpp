// SPDX-License-Identifier: MIT
/// \file
/// `kv_cache<Real>`: the growing state of softmax attention while decoding
/// (docs/math.md#softmax-attention): every key (per q/k head) and value (per value head) seen
/// so far, per sequence. Owning; grows by one row per head and decoded token. Memory is
/// O(t (H K + HV V)) per sequence, against the constant HV K V of a matrix-state rule.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "config.hpp"
#include "error.hpp"

namespace linattn {

template <class Real = float>
class kv_cache {
 public:
  /// An empty cache for `batch` sequences with H q/k heads of dim K and HV value heads of dim V.
  kv_cache(index_t batch, index_t heads, index_t value_heads, index_t key_dim, index_t value_dim)
      : B_(batch), H_(heads), HV_(value_heads), K_(key_dim), V_(value_dim) {
    if (B_ < 1 || H_ < 1 || HV_ < 1 || K_ < 1 || V_ < 1 || HV_ % H_ != 0)
      throw error("linattn::kv_cache: sizes (batch " + std::to_string(B_) + ", heads " + std::to_string(H_) +
                  ", value_heads " + std::to_string(HV_) + ", key_dim " + std::to_string(K_) + ", value_dim " +
                  std::to_string(V_) + ") must be >= 1 with value_heads a multiple of heads");
    keys_.resize(static_cast<std::size_t>(B_ * H_));
    values_.resize(static_cast<std::size_t>(B_ * HV_));
    length_.assign(static_cast<std::size_t>(B_), 0);
  }

  index_t batch() const { return B_; }
  index_t heads() const { return H_; }
  index_t value_heads() const { return HV_; }
  index_t key_dim() const { return K_; }
  index_t value_dim() const { return V_; }
  /// Tokens cached for sequence b.
  index_t length(index_t b) const { return length_[static_cast<std::size_t>(b)]; }
  /// Bytes held by the cached keys and values (all sequences).
  std::size_t bytes() const {
    std::size_t n = 0;
    for (index_t b = 0; b < B_; ++b) n += static_cast<std::size_t>(length(b) * (H_ * K_ + HV_ * V_));
    return n * sizeof(Real);
  }
  /// Forgets every token (keeps the allocation).
  void clear() {
    for (auto& x : keys_) x.clear();
    for (auto& x : values_) x.clear();
    length_.assign(length_.size(), 0);
  }

  /// Keys of sequence b, head h: `length(b)` rows of K (row-major).
  const Real* keys(index_t b, index_t h) const { return keys_[static_cast<std::size_t>(b * H_ + h)].data(); }
  /// Values of sequence b, value head hv: `length(b)` rows of V (row-major).
  const Real* values(index_t b, index_t hv) const { return values_[static_cast<std::size_t>(b * HV_ + hv)].data(); }

  /// Appends one token of sequence b; `key(h, i)` and `value(hv, j)` give its entries.
  template <class KeyFn, class ValueFn>
  void append(index_t b, KeyFn&& key, ValueFn&& value) {
    for (index_t h = 0; h < H_; ++h)
      for (index_t i = 0; i < K_; ++i) keys_[static_cast<std::size_t>(b * H_ + h)].push_back(static_cast<Real>(key(h, i)));
    for (index_t hv = 0; hv < HV_; ++hv)
      for (index_t j = 0; j < V_; ++j)
        values_[static_cast<std::size_t>(b * HV_ + hv)].push_back(static_cast<Real>(value(hv, j)));
    ++length_[static_cast<std::size_t>(b)];
  }

 private:
  index_t B_, H_, HV_, K_, V_;
  std::vector<std::vector<Real>> keys_, values_;  // [B * H][len * K], [B * HV][len * V]
  std::vector<index_t> length_;                   // [B]
};

}  // namespace linattn
