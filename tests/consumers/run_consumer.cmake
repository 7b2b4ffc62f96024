# SPDX-License-Identifier: MIT
# ctest driver for the consumer tests, run as `cmake -D... -P run_consumer.cmake`.
#
#   -DSETTINGS=<file>      toolchain of the parent build (generator, compiler, flags, prefix
#                          path), written by tests/consumers/CMakeLists.txt
#   -DCONFIG=<config>      $<CONFIG> of the parent build (may be empty)
# Install step:
#   -DINSTALL_FROM=<dir>   run `cmake --install <dir> --prefix <PREFIX>` and stop
#   -DPREFIX=<dir>         install prefix (wiped first)
# Consumer step (configure -> build -> run, in a wiped BUILD directory):
#   -DSOURCE=<dir> -DBUILD=<dir>
#   -DPREFIX=<dir>               optional: prepended to CMAKE_PREFIX_PATH (find_package)
#   -DLINATTN_SOURCE_DIR=<dir>   optional: passed on (add_subdirectory, FetchContent)
cmake_minimum_required(VERSION 3.21)

foreach(var IN ITEMS SETTINGS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()
include("${SETTINGS}")

string(TIMESTAMP t0 "%s")
function(step what)
  string(TIMESTAMP t "%s")
  math(EXPR dt "${t} - ${t0}")
  message(STATUS "[${dt} s] ${what}")
endfunction()

if(DEFINED INSTALL_FROM)
  file(REMOVE_RECURSE "${PREFIX}")
  set(config_args)
  if(NOT CONFIG STREQUAL "")
    set(config_args --config "${CONFIG}")
  endif()
  step("install ${INSTALL_FROM} -> ${PREFIX}")
  execute_process(COMMAND "${CMAKE_COMMAND}" --install "${INSTALL_FROM}" --prefix "${PREFIX}" ${config_args}
                  COMMAND_ERROR_IS_FATAL ANY)
  foreach(f include/linattn/linattn.hpp share/pkgconfig/linattn.pc share/doc/linattn/LICENSE
            share/doc/linattn/docs/design.md share/cmake/linattn/linattnConfig.cmake)
    if(NOT EXISTS "${PREFIX}/${f}")
      message(FATAL_ERROR "install did not put ${f} under ${PREFIX}")
    endif()
  endforeach()
  step("installed")
  return()
endif()

foreach(var IN ITEMS SOURCE BUILD)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

# ---- configure ------------------------------------------------------------------------------
set(args -S "${SOURCE}" -B "${BUILD}" -G "${CONSUMER_GENERATOR}")
if(CONSUMER_GENERATOR_PLATFORM)
  list(APPEND args -A "${CONSUMER_GENERATOR_PLATFORM}")
endif()
if(CONSUMER_GENERATOR_TOOLSET)
  list(APPEND args -T "${CONSUMER_GENERATOR_TOOLSET}")
endif()
foreach(var IN ITEMS CMAKE_MAKE_PROGRAM CMAKE_TOOLCHAIN_FILE CMAKE_CXX_COMPILER
                     CMAKE_CXX_COMPILER_LAUNCHER Eigen3_DIR)
  if(CONSUMER_${var})
    list(APPEND args "-D${var}=${CONSUMER_${var}}")
  endif()
endforeach()
# Flags are passed even when empty so that sanitizer builds (-fsanitize=... in CMAKE_CXX_FLAGS)
# link their consumers the same way.
list(APPEND args "-DCMAKE_CXX_FLAGS=${CONSUMER_CMAKE_CXX_FLAGS}"
                 "-DCMAKE_EXE_LINKER_FLAGS=${CONSUMER_CMAKE_EXE_LINKER_FLAGS}")
if(CONSUMER_MULTI_CONFIG)
  list(APPEND args "-DCMAKE_CONFIGURATION_TYPES=${CONFIG}")
else()
  list(APPEND args "-DCMAKE_BUILD_TYPE=${CONFIG}")
endif()
set(prefix_path ${CONSUMER_CMAKE_PREFIX_PATH})
if(DEFINED PREFIX)
  list(PREPEND prefix_path "${PREFIX}")
endif()
if(prefix_path)
  string(REPLACE ";" "\\;" prefix_path "${prefix_path}")  # keep the list one argument
  list(APPEND args "-DCMAKE_PREFIX_PATH=${prefix_path}")
endif()
if(DEFINED LINATTN_SOURCE_DIR)
  list(APPEND args "-DLINATTN_SOURCE_DIR=${LINATTN_SOURCE_DIR}")
endif()

file(REMOVE_RECURSE "${BUILD}")
step("configure ${SOURCE}")
execute_process(COMMAND "${CMAKE_COMMAND}" ${args} COMMAND_ERROR_IS_FATAL ANY)

# ---- build ----------------------------------------------------------------------------------
set(build_args --build "${BUILD}")
if(NOT CONFIG STREQUAL "")
  list(APPEND build_args --config "${CONFIG}")
endif()
step("build")
execute_process(COMMAND "${CMAKE_COMMAND}" ${build_args} COMMAND_ERROR_IS_FATAL ANY)

# ---- run ------------------------------------------------------------------------------------
set(exe_name linattn_consumer)
if(CMAKE_HOST_WIN32)
  string(APPEND exe_name .exe)
endif()
set(exe "${BUILD}/${exe_name}")
if(NOT EXISTS "${exe}" AND NOT CONFIG STREQUAL "")
  set(exe "${BUILD}/${CONFIG}/${exe_name}")
endif()
if(NOT EXISTS "${exe}")
  message(FATAL_ERROR "consumer built, but ${exe_name} is not in ${BUILD}")
endif()
step("run ${exe}")
execute_process(COMMAND "${exe}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer ${SOURCE} failed (exit status ${rc})")
endif()
step("passed")
