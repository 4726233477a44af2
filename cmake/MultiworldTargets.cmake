# mw_target_defaults(<target>): warnings and sanitizer flags shared by every project target.
function(mw_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  # clang checks the lock rules written with runtime/src/base/thread_annotations.h; a broken one fails
  # the build. (GCC has no such analysis: the annotations expand to nothing there.)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE -Wthread-safety -Werror=thread-safety)
  endif()
  if(MW_SANITIZE STREQUAL "address")
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  elseif(MW_SANITIZE STREQUAL "fuzz")
    # clang: libFuzzer's coverage instrumentation with ASan+UBSan; the fuzz targets (tests/fuzz)
    # link libFuzzer itself.
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link,address,undefined
                                             -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  elseif(MW_SANITIZE STREQUAL "thread")
    target_compile_options(${target} PRIVATE -fsanitize=thread -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=thread)
  elseif(NOT MW_SANITIZE STREQUAL "")
    message(FATAL_ERROR
            "MW_SANITIZE must be '', 'address', 'thread' or 'fuzz', not '${MW_SANITIZE}'")
  endif()
endfunction()
