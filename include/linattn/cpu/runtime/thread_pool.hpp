// SPDX-License-Identifier: MIT
/// \file
/// A small process-wide thread pool behind `parallel_for`.
///
/// - Helpers are claimed, not broadcast to: a call on `threads` threads hands its slots 1 ..
///   threads - 1 to that many idle workers, one each, and wakes only those. Slot s goes to
///   worker s - 1 whenever that worker is idle, so that calls repeated on the same tasks (decode)
///   run each task on the same thread, whose core still caches the task's data.
/// - Calls are re-entrant: concurrent callers (and calls made from inside a task) claim whichever
///   workers are idle; a slot no worker could take is left to the others. The caller always
///   works on its own job and the tasks of every slot are open to every thread, so a busy pool
///   only costs parallelism, never progress.
/// - The pool has one worker per core of the process's affinity mask, less the caller's, started
///   on first use, as many as calls have asked for.
/// - Short calls (a decode step: tens of microseconds) cannot afford to wait for a sleeping
///   thread (a futex wake-up takes 10-50 us): a worker spins for a short while after its job
///   before it sleeps, and the caller spins for its helpers' last tasks before it sleeps on the
///   job, so calls made back to back find their threads awake.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "../../core/config.hpp"
#include "../../core/hardware.hpp"

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
/// How long a caller whose tasks are all done waits for its helpers to free themselves.
inline constexpr int release_spin_us = 5;

class thread_pool {
 public:
  static thread_pool& instance() {
    static thread_pool pool;
    return pool;
  }

  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  ~thread_pool() {
    const int started = started_.load();
    for (int w = 0; w < started; ++w) {
      worker& wk = *workers_[std::size_t(w)];
      {
        std::lock_guard<std::mutex> lock(wk.mutex);
        wk.stop = true;
      }
      wk.wake.notify_one();
    }
    for (int w = 0; w < started; ++w) workers_[std::size_t(w)]->thread.join();
  }

  /// Workers the pool can hold (cores of the affinity mask less one).
  int capacity() const { return static_cast<int>(workers_.size()); }

  /// Runs fn(task, slot) for every task in [0, n) on at most `threads` threads. Slots are
  /// distinct among concurrently running calls of fn within this job and lie in [0, threads).
  /// `affine`: slot s owns the s-th of the slots' equal ranges of tasks and then helps with the
  /// others' remaining tasks from their ends, so that calls repeated on the same tasks (decode)
  /// find each task's data in the cache of the core that ran it last time, while a slow or
  /// absent thread's share is still taken over task by task.
  void run(index_t n, int threads, const std::function<void(index_t, int)>& fn, bool affine = false) {
    const int slots = static_cast<int>(std::min<index_t>(n, std::min(threads, capacity() + 1)));
    if (slots <= 1) {
      for (index_t i = 0; i < n; ++i) fn(i, 0);
      return;
    }
    start_workers(slots - 1);
    auto j = std::make_shared<job>(fn, n, slots, affine);
    for (int s = 1; s < slots; ++s)
      if (worker* w = claim(s - 1)) w->post(j, s);
    work(*j, 0);
    if (!spin_until([&] { return j->done.load(std::memory_order_acquire) == j->n; }, idle_spin_us)) {
      std::unique_lock<std::mutex> lock(j->mutex);
      j->sleeping.store(true);  // before the last look at `done` (work: the other side)
      j->finished.wait(lock, [&] { return j->done.load() == j->n; });
    }
    // A helper frees itself just after the job's last task; waiting that moment out (briefly:
    // a lagging helper is not waited for) lets the next call find it idle and keep its slot.
    spin_until([&] { return j->attached.load(std::memory_order_acquire) == 0; }, release_spin_us);
    if (j->error) std::rethrow_exception(j->error);
  }

 private:
  /// The open tasks [front, back) of one range, alone in its cache line (threads working on
  /// different ranges do not contend for one line at every task). The range's owner takes
  /// tasks from the front, other threads from the back: when a thread lags by the same margin
  /// call after call, the same tail tasks move to the same helper, so each task's data stays in
  /// one core's cache. Front and back share one 64-bit word, so that taking the last task is
  /// one compare-and-swap that exactly one side wins.
  struct alignas(128) range_cursor {
    std::atomic<std::uint64_t> span{0};  // front in the low 32 bits, back in the high ones

    static std::uint64_t pack(index_t front, index_t back) {
      return std::uint64_t(front) | (std::uint64_t(back) << 32);
    }
    void reset(index_t front, index_t back) { span.store(pack(front, back), std::memory_order_relaxed); }
    /// Takes the front task (owner) or the back one (anyone else); -1 when none is left.
    index_t take(bool owner) {
      std::uint64_t s = span.load(std::memory_order_relaxed);
      for (;;) {
        const index_t front = index_t(s & 0xffffffffu), back = index_t(s >> 32);
        if (front >= back) return -1;
        const std::uint64_t next = owner ? pack(front + 1, back) : pack(front, back - 1);
        if (span.compare_exchange_weak(s, next, std::memory_order_relaxed)) return owner ? front : back - 1;
      }
    }
  };

  struct job {
    job(const std::function<void(index_t, int)>& f, index_t count, int slots, bool affine)
        : fn(f), n(count), ranges(affine && count <= max_affine_tasks ? slots : 1),
          cursors(ranges > 1 ? std::size_t(ranges) : 0) {
      for (std::size_t r = 0; r < cursors.size(); ++r) cursors[r].reset(first(int(r)), first(int(r) + 1));
    }
    /// First task of range r (range r = [first(r), first(r + 1))).
    index_t first(int r) const { return index_t(r) * n / ranges; }
    /// The next task for `slot` (-1: none left): a shared counter when there is one range, else
    /// the slot's own range from the front, then the other ranges from the back.
    index_t take(int slot) {
      if (ranges == 1) {
        const index_t i = next.fetch_add(1, std::memory_order_relaxed);
        return i < n ? i : -1;
      }
      for (int k = 0; k < ranges; ++k) {
        const int r = (slot + k) % ranges;
        const index_t i = cursors[std::size_t(r)].take(k == 0);
        if (i >= 0) return i;
      }
      return -1;
    }
    static constexpr index_t max_affine_tasks = 0x7fffffff;  // a range's ends fit in 32 bits
    const std::function<void(index_t, int)>& fn;  // the caller's; called only for open tasks
    index_t n;
    int ranges;                         // 1, or the slot count for an affine job
    std::vector<range_cursor> cursors;  // [ranges] (affine jobs)
    alignas(128) std::atomic<index_t> next{0};  // the next task (one range)
    alignas(128) std::atomic<index_t> done{0};  // tasks finished (added once per thread)
    std::atomic<int> attached{0};  // helpers posted this job that have not freed themselves yet
    std::atomic<bool> sleeping{false};  // the caller waits on `finished`
    std::mutex mutex;
    std::condition_variable finished;
    std::exception_ptr error;
  };

  /// One worker thread and its mailbox: at most one job at a time, given by the caller that
  /// claimed the worker; the worker frees itself when its share is done.
  struct worker {
    std::atomic<bool> claimed{false};  // set by the claiming caller, cleared by the worker
    std::atomic<bool> posted{false};   // `job` holds work (read without the lock while spinning)
    std::mutex mutex;
    std::condition_variable wake;
    std::shared_ptr<job> assigned;  // the claiming caller's until `posted`, then the worker's
    int slot = 0;                   // as `assigned`
    bool stop = false;              // guarded by mutex
    std::thread thread;

    /// Hands job j to this (claimed) worker as slot s. `assigned` and `slot` belong to the
    /// claiming caller until `posted` is set and to the worker after, so a spinning worker
    /// takes them without the lock; the lock only orders `posted` against a sleeping worker's
    /// wait (no lost wake-up).
    void post(std::shared_ptr<job> j, int s) {
      j->attached.fetch_add(1, std::memory_order_relaxed);
      assigned = std::move(j);
      slot = s;
      {
        std::lock_guard<std::mutex> lock(mutex);
        posted.store(true, std::memory_order_release);
      }
      wake.notify_one();
    }

    void loop() {
      for (;;) {
        if (!spin_until([&] { return posted.load(std::memory_order_acquire); }, idle_spin_us)) {
          std::unique_lock<std::mutex> lock(mutex);
          wake.wait(lock, [&] { return stop || posted.load(std::memory_order_acquire); });
          if (stop) return;
        }
        std::shared_ptr<job> j = std::move(assigned);
        const int s = slot;
        posted.store(false, std::memory_order_relaxed);
        work(*j, s);
        claimed.store(false, std::memory_order_release);
        j->attached.fetch_sub(1, std::memory_order_release);
        j.reset();
      }
    }
  };

  thread_pool() {
    const int helpers = std::max(0, available_cores() - 1);
    workers_.reserve(std::size_t(helpers));
    for (int w = 0; w < helpers; ++w) workers_.push_back(std::make_unique<worker>());
  }

  /// Starts workers [0, count) where not yet running.
  void start_workers(int count) {
    if (started_.load(std::memory_order_acquire) >= count) return;
    std::lock_guard<std::mutex> lock(start_mutex_);
    for (int w = started_.load(); w < count; ++w) {
      worker* wk = workers_[std::size_t(w)].get();
      wk->thread = std::thread([wk] { wk->loop(); });
      started_.store(w + 1, std::memory_order_release);
    }
  }

  /// Claims worker `preferred` if it is idle, else the first idle started worker; nullptr when
  /// every worker is busy.
  worker* claim(int preferred) {
    const auto take = [](worker& w) {
      bool idle = false;
      return w.claimed.compare_exchange_strong(idle, true, std::memory_order_acq_rel);
    };
    if (take(*workers_[std::size_t(preferred)])) return workers_[std::size_t(preferred)].get();
    const int started = started_.load(std::memory_order_acquire);
    for (int w = 0; w < started; ++w)
      if (w != preferred && take(*workers_[std::size_t(w)])) return workers_[std::size_t(w)].get();
    return nullptr;
  }

  /// Slot `slot`'s share of a job: tasks until none is left (job::take).
  static void work(job& j, int slot) {
    index_t finished = 0;
    for (index_t i; (i = j.take(slot)) >= 0; ++finished) {
      try {
        j.fn(i, slot);
      } catch (...) {
        std::lock_guard<std::mutex> lock(j.mutex);
        if (!j.error) j.error = std::current_exception();
      }
    }
    // The last task's thread wakes the caller only if it sleeps: `done` is stored before
    // `sleeping` is read here, and the caller stores `sleeping` before it reads `done` (both
    // sequentially consistent), so at least one side sees the other's store.
    if (finished > 0 && j.done.fetch_add(finished) + finished == j.n && j.sleeping.load()) {
      std::lock_guard<std::mutex> lock(j.mutex);
      j.finished.notify_all();
    }
  }

  std::vector<std::unique_ptr<worker>> workers_;  // [capacity()], never resized after construction
  std::atomic<int> started_{0};                   // workers [0, started_) have their thread
  std::mutex start_mutex_;
};

/// Runs fn(task, slot) for task in [0, n) on up to `threads` threads; blocks until done.
/// `affine`: thread_pool::run.
inline void parallel_for(index_t n, int threads, const std::function<void(index_t, int)>& fn, bool affine = false) {
  thread_pool::instance().run(n, threads, fn, affine);
}

}  // namespace linattn::detail
