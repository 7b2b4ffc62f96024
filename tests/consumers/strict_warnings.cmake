# SPDX-License-Identifier: MIT
# The library must compile warning-free in a strict consumer: linattn_strict_warnings(target)
# adds -Wall -Wextra -Wpedantic -Werror (and -march=native where the compiler knows it and the
# build is not a sanitizer build).
function(linattn_strict_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Werror)
    include(CheckCXXCompilerFlag)
    check_cxx_compiler_flag(-march=native linattn_consumer_native)
    if(linattn_consumer_native AND NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize")
      target_compile_options(${target} PRIVATE -march=native)
    endif()
  endif()
endfunction()
