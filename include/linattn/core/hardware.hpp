// SPDX-License-Identifier: MIT
/// \file
/// How many cores this process may run on: the threads a call gets with `options::threads = 0`
/// and the size of the CPU thread pool.
#pragma once

#include <algorithm>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

namespace linattn::detail {

/// The CPUs in this process's affinity mask (`taskset`, cgroup cpusets), read once; where the
/// mask cannot be read, every hardware thread. At least 1.
inline int available_cores() {
  static const int cores = [] {
#if defined(__linux__) && defined(CPU_COUNT)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
      const int n = CPU_COUNT(&set);
      if (n > 0) return n;
    }
#endif
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return cores;
}

}  // namespace linattn::detail
