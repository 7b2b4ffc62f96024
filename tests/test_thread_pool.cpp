// SPDX-License-Identifier: MIT
// The CPU thread pool behind every form's threads: each task runs once, slots are exclusive,
// errors propagate, and concurrent or nested callers make progress.
#include "support/catch.hpp"

#include <linattn/core/problem.hpp>
#include <linattn/cpu/runtime/thread_pool.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace la = linattn;
using la::index_t;

namespace {

/// Runs parallel_for(n, threads) and checks: every task ran exactly once, every slot lay in
/// [0, min(threads, cores)), and no slot was in use by two tasks at once.
void check_run(index_t n, int threads, bool affine) {
  const int cores = la::detail::available_cores();
  const int slots = std::max(1, std::min(threads, cores));
  std::vector<std::atomic<int>> runs(static_cast<std::size_t>(n));
  std::vector<std::atomic<int>> busy(static_cast<std::size_t>(slots));
  std::atomic<int> bad_slot{0}, overlap{0};
  la::detail::parallel_for(
      n, threads,
      [&](index_t i, int s) {
        if (s < 0 || s >= slots) {
          ++bad_slot;
          return;
        }
        if (busy[std::size_t(s)].exchange(1) != 0) ++overlap;
        runs[std::size_t(i)].fetch_add(1);
        std::this_thread::yield();  // let the other slots overlap with this task
        busy[std::size_t(s)].store(0);
      },
      affine);
  INFO("n " << n << ", threads " << threads << ", affine " << affine);
  CHECK(bad_slot.load() == 0);
  CHECK(overlap.load() == 0);
  index_t once = 0;
  for (auto& r : runs) once += r.load() == 1;
  CHECK(once == n);
}

}  // namespace

TEST_CASE("thread pool: every task runs once on an exclusive slot", "[thread_pool]") {
  for (const bool affine : {false, true})
    for (const index_t n : {0, 1, 2, 3, 5, 16, 17, 101})
      for (const int threads : {1, 2, 3, 8, 64}) check_run(n, threads, affine);
}

TEST_CASE("thread pool: a thread count of 0 means every core of the affinity mask", "[thread_pool]") {
  const int cores = la::detail::available_cores();
  CHECK(cores >= 1);
  CHECK(cores <= static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  CHECK(la::detail::resolved_threads(0) == cores);
  CHECK(la::detail::resolved_threads(1) == 1);
  CHECK(la::detail::resolved_threads(cores + 7) == cores);
}

TEST_CASE("thread pool: a task's exception reaches the caller after every other task ran", "[thread_pool]") {
  for (const bool affine : {false, true}) {
    std::atomic<int> ran{0};
    const auto call = [&] {
      la::detail::parallel_for(
          40, 4,
          [&](index_t i, int) {
            ++ran;
            if (i == 7 || i == 31) throw std::runtime_error("task failed");
          },
          affine);
    };
    CHECK_THROWS_WITH(call(), "task failed");
    CHECK(ran.load() == 40);
    check_run(40, 4, affine);  // the pool still works
  }
}

TEST_CASE("thread pool: concurrent callers each complete their own job", "[thread_pool]") {
  constexpr int callers = 4, calls = 150;
  constexpr index_t n = 23;
  std::vector<std::unique_ptr<std::atomic<long>>> sums;
  for (int c = 0; c < callers; ++c) sums.push_back(std::make_unique<std::atomic<long>>(0));
  std::vector<std::thread> threads;
  for (int c = 0; c < callers; ++c)
    threads.emplace_back([&, c] {
      for (int k = 0; k < calls; ++k)
        la::detail::parallel_for(
            n, 2 + c % 2, [&](index_t i, int) { sums[std::size_t(c)]->fetch_add(long(i) + 1); }, k % 2 == 0);
    });
  for (auto& t : threads) t.join();
  for (int c = 0; c < callers; ++c) CHECK(sums[std::size_t(c)]->load() == long(calls) * n * (n + 1) / 2);
}

TEST_CASE("thread pool: a task may itself call parallel_for", "[thread_pool]") {
  std::vector<std::atomic<int>> inner(12 * 9);
  la::detail::parallel_for(12, 3, [&](index_t i, int) {
    la::detail::parallel_for(9, 3, [&](index_t j, int) { inner[std::size_t(i * 9 + j)].fetch_add(1); }, true);
  });
  int once = 0;
  for (auto& r : inner) once += r.load() == 1;
  CHECK(once == 12 * 9);
}

TEST_CASE("thread pool: a sleeping caller and sleeping helpers are woken", "[thread_pool]") {
  // Tasks on helper slots outlast the caller's spin (so it sleeps until the last one ends), and
  // the pauses between calls outlast the helpers' spin (so they sleep until the next post).
  const auto spin = std::chrono::microseconds(la::detail::idle_spin_us);
  for (int k = 0; k < 12; ++k) {
    std::atomic<int> ran{0};
    la::detail::parallel_for(
        6, 2,
        [&](index_t, int slot) {
          if (slot != 0) std::this_thread::sleep_for(2 * spin);
          ++ran;
        },
        k % 2 == 0);
    CHECK(ran.load() == 6);
    std::this_thread::sleep_for(spin + std::chrono::microseconds(50 * k));
  }
}
