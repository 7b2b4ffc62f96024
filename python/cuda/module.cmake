# SPDX-License-Identifier: MIT
# linattn._cuda: the CUDA forward and backward kernels (linattn::cuda), built when LINATTN_PY_CUDA is ON, or
# AUTO and a CUDA compiler is found. The kernels (src/cuda/rules/*.cu, nvcc) are a static library
# of their own; the module (src/cuda/module.cpp, the host compiler with nanobind) calls them
# through src/cuda/device_calls.hpp. The CUDA runtime is linked statically, so the module needs the
# driver only (not the toolkit, nor torch's copy of the runtime). Architectures: 90 (Hopper)
# unless CMAKE_CUDA_ARCHITECTURES is given, e.g. pip install . -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=80
set(linattn_py_cuda OFF)
if(LINATTN_PY_CUDA STREQUAL "AUTO")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(linattn_py_cuda ON)
  endif()
elseif(LINATTN_PY_CUDA)
  set(linattn_py_cuda ON)
endif()
if(NOT linattn_py_cuda)
  message(STATUS "linattn: building the CPU module only (no CUDA compiler, or LINATTN_PY_CUDA=OFF)")
  return()
endif()

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(linattn_py_cuda_src ${CMAKE_CURRENT_LIST_DIR}/../src/cuda)
add_library(linattn_py_cuda_kernels STATIC
  ${linattn_py_cuda_src}/rules/hebbian.cu ${linattn_py_cuda_src}/rules/scalar_decay.cu
  ${linattn_py_cuda_src}/rules/delta.cu ${linattn_py_cuda_src}/rules/gated_delta.cu
  ${linattn_py_cuda_src}/rules/longhorn.cu ${linattn_py_cuda_src}/rules/vector_decay.cu
  ${linattn_py_cuda_src}/rules/kda.cu ${linattn_py_cuda_src}/workspace.cu)
set_target_properties(linattn_py_cuda_kernels PROPERTIES POSITION_INDEPENDENT_CODE ON CUDA_STANDARD 20)
# The library's CUDA flags (C++20, relaxed constexpr, LINATTN_WITH_CUDA), with the static runtime.
# CUDA_STANDARD 20 only keeps CMake from appending its default -std=c++17 after the flag below
# (CMake 3.25 has no flag of its own for C++20 with nvcc 13).
target_include_directories(linattn_py_cuda_kernels PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../../include)
target_compile_definitions(linattn_py_cuda_kernels PRIVATE LINATTN_WITH_CUDA)
target_compile_options(linattn_py_cuda_kernels PRIVATE -std=c++20 --expt-relaxed-constexpr)
target_link_libraries(linattn_py_cuda_kernels PRIVATE CUDA::cudart_static)

nanobind_add_module(_cuda NB_STATIC ${linattn_py_cuda_src}/module.cpp)
target_link_libraries(_cuda PRIVATE linattn::linattn linattn_py_cuda_kernels CUDA::cudart_static)
install(TARGETS _cuda LIBRARY DESTINATION linattn)
