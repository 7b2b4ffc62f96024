# SPDX-License-Identifier: MIT
# Checks that no include of the library runs upwards (docs/design.md#layers), in CMake script
# mode so that a fresh machine needs nothing but cmake:
#
#   cmake -DROOT=<repository> -P tests/house/check_include_layers.cmake
#
# Every `#include "..."` of a file under include/linattn/ is resolved against the including
# file's folder, and the folder it lands in must be one the including folder may use:
#
#   core/                          core/
#   rules/                         core/, rules/
#   cpu/linalg/                    core/, cpu/linalg/
#   cpu/io/, cpu/runtime/          core/, the CPU support folders (linalg, io, runtime), cpu/*.hpp
#   cpu/<family>/                  core/, the support folders, cpu/*.hpp, its own family folder
#   cpu/*.hpp                      core/, cpu/
#   cuda/tile/                     core/, cuda/tile/, cuda/*.hpp (element types)
#   cuda/kernels/                  core/, cuda/tile/, cuda/kernels/, cuda/*.hpp
#   cuda/host/                     core/, cuda/tile/, cuda/kernels/, cuda/host/, cuda/*.hpp
#   cuda/*.cuh, cuda/*.hpp         core/, cuda/
#   forms/                         core/, cpu/, forms/
#   linattn.hpp, cuda.cuh, ...     anything (the umbrellas)
#
# So the CPU and CUDA backends never include each other, nothing below forms/ includes an entry
# point, and the dispatch table (core/dispatch.hpp) is declared below every cell that fills it.
# Fails with one line per include that breaks a rule: file:line: what it includes.

cmake_minimum_required(VERSION 3.21)

if(NOT DEFINED ROOT)
  get_filename_component(ROOT "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
endif()
get_filename_component(ROOT "${ROOT}" ABSOLUTE)
set(lib "${ROOT}/include/linattn")
if(NOT EXISTS "${lib}/core")
  message(FATAL_ERROR "check_include_layers: ${lib}/core does not exist (pass -DROOT=<repository>)")
endif()

# The folders (relative to include/linattn, with a trailing '/') a file in `folder` may include
# from; a file directly in cpu/ or cuda/ is named by its folder "cpu/" or "cuda/".
function(_allowed folder out)
  set(support "cpu/linalg/" "cpu/io/" "cpu/runtime/" "cpu/")
  if(folder STREQUAL "core/")
    set(a "core/")
  elseif(folder STREQUAL "rules/")
    set(a "core/" "rules/")
  elseif(folder STREQUAL "cpu/linalg/")
    set(a "core/" "cpu/linalg/")
  elseif(folder MATCHES "^cpu/(io|runtime)/$")
    set(a "core/" ${support})
  elseif(folder STREQUAL "cpu/")
    set(a "core/" "cpu/*")
  elseif(folder MATCHES "^(cpu/[^/]+/)")
    set(a "core/" ${support} "${CMAKE_MATCH_1}*")  # a family folder and its subfolders
  elseif(folder STREQUAL "cuda/tile/")
    set(a "core/" "cuda/tile/" "cuda/")
  elseif(folder STREQUAL "cuda/kernels/" OR folder MATCHES "^cuda/kernels/")
    set(a "core/" "cuda/tile/" "cuda/kernels/*" "cuda/")
  elseif(folder STREQUAL "cuda/host/")
    set(a "core/" "cuda/tile/" "cuda/kernels/*" "cuda/host/" "cuda/")
  elseif(folder STREQUAL "cuda/")
    set(a "core/" "cuda/*")
  elseif(folder STREQUAL "forms/")
    set(a "core/" "cpu/*" "forms/")
  else()
    set(a "*")
  endif()
  set(${out} "${a}" PARENT_SCOPE)
endfunction()

set(problems "")
set(count 0)
set(includes 0)
file(GLOB_RECURSE headers RELATIVE "${lib}" "${lib}/*.hpp" "${lib}/*.cuh")
foreach(rel IN LISTS headers)
  get_filename_component(dir "${rel}" DIRECTORY)
  set(folder "")
  if(dir)
    set(folder "${dir}/")
  endif()
  _allowed("${folder}" allowed)
  # One list entry per line; ';', '[' and ']' replaced first, since CMake lists treat them specially.
  file(READ "${lib}/${rel}" content)
  string(REGEX REPLACE "[];[]" "_" content "${content}")
  string(REPLACE "\n" ";" lines "${content}")
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\"")
      continue()
    endif()
    math(EXPR includes "${includes} + 1")
    set(target "${CMAKE_MATCH_1}")
    get_filename_component(abs "${lib}/${folder}${target}" ABSOLUTE)
    file(RELATIVE_PATH trel "${lib}" "${abs}")
    if(trel MATCHES "^\\.\\." OR NOT EXISTS "${abs}")
      string(APPEND problems "  include/linattn/${rel}:${n}: includes \"${target}\", which is not a file of include/linattn\n")
      math(EXPR count "${count} + 1")
      continue()
    endif()
    get_filename_component(tdir "${trel}" DIRECTORY)
    set(tfolder "")
    if(tdir)
      set(tfolder "${tdir}/")
    endif()
    set(ok FALSE)
    foreach(a IN LISTS allowed)
      if(a STREQUAL "*")
        set(ok TRUE)
      elseif(a MATCHES "^(.*)\\*$")
        string(FIND "${tfolder}" "${CMAKE_MATCH_1}" at)
        if(at EQUAL 0)
          set(ok TRUE)
        endif()
      elseif(a STREQUAL tfolder)
        set(ok TRUE)
      endif()
    endforeach()
    if(NOT ok)
      string(REPLACE ";" " " shown "${allowed}")
      string(APPEND problems "  include/linattn/${rel}:${n}: includes ${trel}; ${folder} may include only ${shown}\n")
      math(EXPR count "${count} + 1")
    endif()
  endforeach()
endforeach()

list(LENGTH headers files)
if(count GREATER 0)
  message(FATAL_ERROR "check_include_layers: ${count} include(s) run against the layers:\n${problems}")
endif()
message(STATUS "check_include_layers: ${includes} includes in ${files} headers, none runs upwards")
