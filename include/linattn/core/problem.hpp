// SPDX-License-Identifier: MIT
/// \file
/// The validated description of one call: sizes, sequences and the resolved options.
#pragma once

#include <algorithm>
#include <vector>

#include "config.hpp"
#include "hardware.hpp"
#include "options.hpp"

namespace linattn::detail {

/// Which driver a call goes to; used for messages and form-specific checks.
enum class form { recurrent, parallel, chunkwise, decode, recurrent_backward, chunkwise_backward };
/// Whether f is a forward form (the dispatch table's forward cells take the forward arguments).
constexpr bool forward_form(form f) { return f != form::recurrent_backward && f != form::chunkwise_backward; }

inline const char* form_name(form f) {
  switch (f) {
    case form::recurrent: return "recurrent_forward";
    case form::parallel: return "parallel_forward";
    case form::chunkwise: return "chunkwise_forward";
    case form::decode: return "decode_step";
    case form::recurrent_backward: return "recurrent_backward";
    case form::chunkwise_backward: return "chunkwise_backward";
  }
  return "?";
}

/// A caller's integer list (the offsets of a packed batch, the pool slots of the sequences),
/// copied once at validation: nothing the call writes (an output placed over the caller's
/// list, say) can change it while the call runs.
class copied_integers {
 public:
  copied_integers() = default;
  explicit copied_integers(const integer_list_view& cu) : given_(cu.given()) {
    if (!given_) return;
    offsets_.resize(static_cast<std::size_t>(cu.size()));
    for (index_t i = 0; i < cu.size(); ++i) offsets_[static_cast<std::size_t>(i)] = cu[i];
  }
  bool given() const { return given_; }
  index_t size() const { return static_cast<index_t>(offsets_.size()); }
  index_t operator[](index_t i) const { return offsets_[static_cast<std::size_t>(i)]; }
  /// The same list with every entry times f (token offsets -> sub-step offsets).
  copied_integers times(index_t f) const {
    copied_integers c = *this;
    for (index_t& o : c.offsets_) o *= f;
    return c;
  }

 private:
  std::vector<index_t> offsets_;
  bool given_ = false;
};

/// The N + 1 offsets of a packed batch.
using sequence_offsets = copied_integers;

/// The thread count a call runs on: `requested` (>= 0), 0 meaning every core this process may
/// run on (its affinity mask), at most that many.
inline int resolved_threads(int requested) {
  const int cores = available_cores();
  return requested == 0 ? cores : std::min(requested, cores);
}

/// Sizes of a validated call. Sequence n lives in batch row `batch(n)`, tokens
/// [start(n), start(n) + length(n)).
struct problem {
  index_t B = 0, T = 0, H = 0, HV = 0, K = 0, V = 0;
  index_t N = 0;       // number of sequences (B, or cu_seqlens.size() - 1)
  index_t group = 1;   // HV / H: value heads per q/k head
  double scale = 1.0;  // resolved q scale
  index_t chunk = 64;  // chunk size (chunkwise form)
  int threads = 1;     // resolved thread count (>= 1)
  sequence_offsets cu;  // given only for packed batches (N + 1 offsets)
  copied_integers slots;  // given only with options::state_indices (N pool slots, < 0: none)
  index_t checkpoint_every = 0;  // options::checkpoint_every (0: no checkpoints)
  index_t steps = 1;   // Householder steps per token, n_h (householder_product_family)

  index_t batch(index_t n) const { return cu.given() ? 0 : n; }
  index_t start(index_t n) const { return cu.given() ? cu[n] : 0; }
  index_t length(index_t n) const { return cu.given() ? cu[n + 1] - cu[n] : T; }
  index_t max_length() const {
    if (!cu.given()) return T;
    index_t m = 0;
    for (index_t n = 0; n < N; ++n) m = length(n) > m ? length(n) : m;
    return m;
  }
  /// The state slot of sequence n: n itself, or its pool slot (negative: start from zero and
  /// write nothing back).
  index_t slot(index_t n) const { return slots.given() ? slots[n] : n; }
  /// q/k head read by value head hv (grouped value heads).
  index_t qk_head(index_t hv) const { return hv / group; }
};

}  // namespace linattn::detail
