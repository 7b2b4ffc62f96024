// SPDX-License-Identifier: MIT
/// \file
/// Installs the module's workspace allocator (torch's caching allocator, module.cpp) as
/// linattn::cuda's: the adapter between the integer streams of device_calls.hpp and
/// cudaStream_t.
#include <linattn/cuda/host/workspace_pool.cuh>

#include "device_calls.hpp"

namespace linattn::python {

namespace {

workspace_hook installed;  // the module's hook, for the life of the process

void* allocate(std::size_t bytes, cudaStream_t stream, void*) {
  return installed.allocate(bytes, reinterpret_cast<std::uintptr_t>(stream), installed.context);
}

void release(void* p, std::size_t bytes, cudaStream_t stream, void*) {
  installed.release(p, bytes, reinterpret_cast<std::uintptr_t>(stream), installed.context);
}

}  // namespace

void use_workspace_allocator(const workspace_hook& hook) {
  installed = hook;
  linattn::cuda::set_workspace_allocator({allocate, release, nullptr});
}

}  // namespace linattn::python
