// SPDX-License-Identifier: MIT
/// \file
/// Buffers kept between CPU calls for the per-call copies of inputs (options::normalize_qk's
/// normalised q and k). A call leases a buffer at least as large as it needs (or a new one) and
/// hands it back when it ends; the memory stays reserved, so repeated calls write into pages
/// already mapped instead of faulting in fresh ones (which cost this copy about three times its
/// arithmetic; bench/README.md). `linattn::trim_scratch()` frees what no call holds.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace linattn {

namespace detail {

class scratch_pool {
 public:
  static scratch_pool& instance() {
    static scratch_pool pool;
    return pool;
  }

  /// A buffer of at least `bytes` bytes (its size in `capacity`), taken out of the pool.
  std::unique_ptr<std::byte[]> take(std::size_t bytes, std::size_t& capacity) {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::size_t best = free_.size();
    for (std::size_t i = 0; i < free_.size(); ++i)  // the smallest that fits
      if (free_[i].first >= bytes && (best == free_.size() || free_[i].first < free_[best].first)) best = i;
    if (best == free_.size()) {
      capacity = bytes;
      return std::unique_ptr<std::byte[]>(new std::byte[bytes]);
    }
    capacity = free_[best].first;
    std::unique_ptr<std::byte[]> b = std::move(free_[best].second);
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
    return b;
  }

  /// Returns a buffer to the pool.
  void give(std::unique_ptr<std::byte[]> b, std::size_t capacity) {
    const std::lock_guard<std::mutex> lock(mutex_);
    free_.emplace_back(capacity, std::move(b));
  }

  /// Frees every buffer in the pool (leased ones come back later as usual).
  void trim() {
    const std::lock_guard<std::mutex> lock(mutex_);
    free_.clear();
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::size_t, std::unique_ptr<std::byte[]>>> free_;
};

/// `count` elements of E leased from the scratch pool for the lifetime of this object (not
/// initialised: the caller writes every one it reads).
template <class E>
class scratch_lease {
 public:
  explicit scratch_lease(std::size_t count) : bytes_(scratch_pool::instance().take(count * sizeof(E), capacity_)) {}
  scratch_lease(const scratch_lease&) = delete;
  scratch_lease& operator=(const scratch_lease&) = delete;
  ~scratch_lease() {
    if (bytes_) scratch_pool::instance().give(std::move(bytes_), capacity_);
  }
  E* data() const { return reinterpret_cast<E*>(bytes_.get()); }

 private:
  std::size_t capacity_ = 0;
  std::unique_ptr<std::byte[]> bytes_;
};

}  // namespace detail

/// Frees the CPU calls' scratch buffers that no call is using (see cpu/runtime/scratch_pool.hpp).
inline void trim_scratch() { detail::scratch_pool::instance().trim(); }

}  // namespace linattn
