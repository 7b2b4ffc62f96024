# SPDX-License-Identifier: MIT
# Runs an example with bad arguments (EXPECT_RC 2: one line on stderr naming the problem) or
# with --help (EXPECT_RC 0: usage on stdout). Usage:
#   cmake -DEXE=path -DARGS="--tokens;0" -DEXPECT_RC=2 -P check_arguments.cmake
execute_process(COMMAND ${EXE} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "${EXE} ${ARGS}: exit status '${rc}', expected ${EXPECT_RC}\nstdout: ${out}\nstderr: ${err}")
endif()
if(EXPECT_RC EQUAL 2)
  string(STRIP "${err}" line)
  if(line STREQUAL "" OR line MATCHES "\n")
    message(FATAL_ERROR "${EXE} ${ARGS}: expected one line on stderr, got: '${err}'")
  endif()
  message(STATUS "${line}")
elseif(NOT out MATCHES "--help")
  message(FATAL_ERROR "${EXE} --help: no usage text: '${out}'")
endif()
