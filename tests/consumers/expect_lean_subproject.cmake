# SPDX-License-Identifier: MIT
# Used by the add_subdirectory and FetchContent consumers: linattn built as a subproject must
# not drag in its tests, benchmarks or examples (their options default to PROJECT_IS_TOP_LEVEL).
function(linattn_expect_lean_subproject linattn_dir)
  foreach(opt IN ITEMS LINATTN_BUILD_TESTS LINATTN_BUILD_BENCHMARKS LINATTN_BUILD_EXAMPLES)
    if(${opt})
      message(FATAL_ERROR "${opt} is ON although linattn is not the top-level project")
    endif()
  endforeach()
  get_directory_property(subdirs DIRECTORY "${linattn_dir}" SUBDIRECTORIES)
  if(subdirs)
    message(FATAL_ERROR "linattn as a subproject added subdirectories: ${subdirs}")
  endif()
  message(STATUS "linattn subproject: no tests, benchmarks or examples (as expected)")
endfunction()
