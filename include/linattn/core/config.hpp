// SPDX-License-Identifier: MIT
/// \file
/// Build-wide macros and the index type.
#pragma once

#include <cstddef>

#if defined(__CUDACC__)
#define LINATTN_HOST_DEVICE __host__ __device__
#else
/// Marks functions that serve both the CPU and the CUDA backend (rule coefficients, views).
#define LINATTN_HOST_DEVICE
#endif

namespace linattn {

/// Signed index used for extents, strides and positions.
using index_t = std::ptrdiff_t;

/// Largest chunk size accepted by the chunkwise forms.
inline constexpr index_t max_chunk_size = 256;

}  // namespace linattn
