// SPDX-License-Identifier: MIT
/// \file
/// A small process-wide thread pool behind `parallel_for`. Calls are re-entrant: concurrent
/// callers each get their own job; the caller always works on its own job, so a busy pool
/// only costs parallelism, never progress.
///
/// Short calls (a decode step: tens of microseconds) cannot afford to wait for a sleeping
/// thread to be woken (a futex wake-up takes 10-50 us): the workers spin for a short while
/// after each job before they sleep, and the caller spins for its helpers' last tasks before
/// it sleeps on the job, so calls made back to back find the threads awake.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "../../core/config.hpp"

namespace linattn::detail {

/// Spins (with a pause hint) until pred() holds or about `micros` microseconds have passed;
/// returns pred().
template <class Pred>
bool spin_until(Pred&& pred, int micros) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  for (int i = 0;; ++i) {
    if (pred()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return pred();
  }
}

/// How long a worker stays awake after a job, and how long a caller spins for its helpers.
inline constexpr int idle_spin_us = 200;

class thread_pool {
 public:
  static thread_pool& instance() {
    static thread_pool pool;
    return pool;
  }

  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  ~thread_pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  /// Runs fn(task, slot) for every task in [0, n) on at most `threads` threads. Slots are
  /// distinct among concurrently running calls of fn within this job and lie in [0, threads).
  /// `affine`: slot s starts on the s-th of `threads` equal ranges of tasks and then helps with
  /// the others' remaining tasks, so that calls repeated on the same tasks (decode) find each
  /// task's data in the cache of the core that ran it last time, while a slow or absent
  /// thread's share is still taken over task by task.
  void run(index_t n, int threads, const std::function<void(index_t, int)>& fn, bool affine = false) {
    const int slots = static_cast<int>(std::min<index_t>(n, threads));
    if (slots <= 1) {
      for (index_t i = 0; i < n; ++i) fn(i, 0);
      return;
    }
    ensure_workers();
    auto j = std::make_shared<job>(fn, n, slots, affine);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(j);
      queued_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    work(*j, 0);
    spin_until([&] { return j->done.load(std::memory_order_acquire) == j->n; }, idle_spin_us);
    {
      std::unique_lock<std::mutex> lock(j->mutex);
      j->finished.wait(lock, [&] { return j->done.load() == j->n; });
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto end = std::remove(queue_.begin(), queue_.end(), j);
      queued_.fetch_sub(static_cast<int>(queue_.end() - end), std::memory_order_relaxed);
      queue_.erase(end, queue_.end());
    }
    if (j->error) std::rethrow_exception(j->error);
  }

 private:
  struct job {
    job(const std::function<void(index_t, int)>& f, index_t count, int slots, bool affine)
        : fn(f), n(count), max_slots(slots), ranges(affine ? slots : 1),
          next(std::make_unique<std::atomic<index_t>[]>(std::size_t(ranges))) {
      for (int r = 0; r < ranges; ++r) next[r].store(first(r), std::memory_order_relaxed);
    }
    /// First task of range r (range r = [first(r), first(r + 1))).
    index_t first(int r) const { return index_t(r) * n / ranges; }
    const std::function<void(index_t, int)>& fn;
    index_t n;
    int max_slots;
    int ranges;                                   // 1, or max_slots for an affine job
    std::unique_ptr<std::atomic<index_t>[]> next;  // [ranges] the next task of each range
    std::atomic<index_t> done{0};
    std::atomic<int> next_slot{1};  // slot 0 is the caller's
    std::mutex mutex;
    std::condition_variable finished;
    std::exception_ptr error;
  };

  thread_pool() = default;

  void ensure_workers() {
    std::call_once(started_, [this] {
      const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
      for (unsigned i = 1; i < hw; ++i) workers_.emplace_back([this] { worker_loop(); });
    });
  }

  /// Slot `slot`'s share of a job: its own range first (affine jobs), then the others'.
  static void work(job& j, int slot) {
    for (int k = 0; k < j.ranges; ++k) {
      const int r = (slot + k) % j.ranges;
      const index_t end = j.first(r + 1);
      for (index_t i; (i = j.next[r].fetch_add(1)) < end;) {
        try {
          j.fn(i, slot);
        } catch (...) {
          std::lock_guard<std::mutex> lock(j.mutex);
          if (!j.error) j.error = std::current_exception();
        }
        if (j.done.fetch_add(1) + 1 == j.n) {
          std::lock_guard<std::mutex> lock(j.mutex);
          j.finished.notify_all();
        }
      }
    }
  }

  void worker_loop() {
    for (;;) {
      std::shared_ptr<job> j;
      int slot = 0;
      spin_until([&] { return queued_.load(std::memory_order_acquire) > 0; }, idle_spin_us);
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        j = queue_.front();
        slot = j->next_slot.fetch_add(1);
        // Fully staffed (or out of tasks): nobody else should pick this job up.
        if (slot + 1 >= j->max_slots || j->done.load() >= j->n) {
          queue_.pop_front();
          queued_.fetch_sub(1, std::memory_order_relaxed);
        }
      }
      if (slot < j->max_slots) work(*j, slot);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<job>> queue_;
  std::atomic<int> queued_{0};  // queue_.size(), read without the lock by spinning workers
  std::vector<std::thread> workers_;
  std::once_flag started_;
  bool stop_ = false;
};

/// Runs fn(task, slot) for task in [0, n) on up to `threads` threads; blocks until done.
/// `affine`: thread_pool::run.
inline void parallel_for(index_t n, int threads, const std::function<void(index_t, int)>& fn, bool affine = false) {
  thread_pool::instance().run(n, threads, fn, affine);
}

}  // namespace linattn::detail
