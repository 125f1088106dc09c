# Fuzzing the data structures (src/heap.c, src/wheel.c): tests/fuzz_<t>.c
# each define LLVMFuzzerTestOneInput, which decodes bytes into timer
# operations on a virtual clock and aborts on any mismatch with a reference
# model.
#
#   Always (any compiler): fuzz_replay_<t> feeds every file of
#   tests/corpus/<t>/ plus 2000 fixed pseudo-random inputs to the same
#   function; ctest "fuzz-replay/<t>".  So every build exercises the corpus.
#
#   TMO_FUZZ=ON (clang only; preset "fuzz", `scripts/check fuzz`): fuzz_<t>,
#   the libFuzzer binary, built with -fsanitize=fuzzer,address,undefined.
#   Its structure's sources are compiled into it (not linked from libtmo) so
#   they carry the fuzzer's coverage instrumentation.
set(TMO_FUZZ_TARGETS heap wheel)
set(TMO_FUZZ_REPLAY_RANDOM 2000 CACHE STRING "random inputs each fuzz-replay test adds")
set(tmo_fuzz_src_heap ${PROJECT_SOURCE_DIR}/src/heap.c ${PROJECT_SOURCE_DIR}/src/alloc.c)
set(tmo_fuzz_src_wheel ${PROJECT_SOURCE_DIR}/src/wheel.c)

if(TMO_FUZZ AND NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "TMO_FUZZ needs clang (libFuzzer); use the 'fuzz' preset")
endif()

foreach(t IN LISTS TMO_FUZZ_TARGETS)
  add_executable(fuzz_replay_${t} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_${t}.c
                                  ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_replay.c)
  target_include_directories(fuzz_replay_${t} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}
                                                      ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(fuzz_replay_${t} PRIVATE tmo)
  add_test(NAME fuzz-replay/${t}
           COMMAND fuzz_replay_${t} --random ${TMO_FUZZ_REPLAY_RANDOM}
                   ${CMAKE_CURRENT_SOURCE_DIR}/corpus/${t})
  set_tests_properties(fuzz-replay/${t} PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})

  if(TMO_FUZZ)
    add_executable(fuzz_${t} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_${t}.c ${tmo_fuzz_src_${t}})
    target_include_directories(fuzz_${t} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}
                                                 ${PROJECT_SOURCE_DIR}/src
                                                 ${PROJECT_SOURCE_DIR}/include)
    target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer,address,undefined
                                             -fno-sanitize-recover=undefined
                                             -fno-omit-frame-pointer -g)
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(fuzz_${t} PRIVATE Threads::Threads)
  endif()
endforeach()

# The replay must be able to fail.  A copy of src/wheel.c with its round-up
# removed (deadlines rounded DOWN to a tick: timers fire early) is generated
# into the build tree and built into fuzz_replay_wheel_planted; ctest
# fuzz-replay/wheel-planted passes only when the corpus replay reports that
# mismatch.  Configuring fails if the line to plant the bug in is gone.
set(tmo_wheel_c ${PROJECT_SOURCE_DIR}/src/wheel.c)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${tmo_wheel_c})
file(READ ${tmo_wheel_c} tmo_wheel_src)
set(tmo_roundup "return q + (rem != 0);")
string(FIND "${tmo_wheel_src}" "${tmo_roundup}" tmo_at)
if(tmo_at EQUAL -1)
  message(FATAL_ERROR "tests/fuzz.cmake: '${tmo_roundup}' (the round-up to break) "
                      "is not in src/wheel.c any more: update the planted bug")
endif()
string(REPLACE "${tmo_roundup}" "return q; /* PLANTED BUG: rounds down */"
       tmo_wheel_src "${tmo_wheel_src}")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/planted/wheel_planted.c.tmp "${tmo_wheel_src}")
configure_file(${CMAKE_CURRENT_BINARY_DIR}/planted/wheel_planted.c.tmp
               ${CMAKE_CURRENT_BINARY_DIR}/planted/wheel_planted.c COPYONLY)
add_executable(fuzz_replay_wheel_planted ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_wheel.c
                                         ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_replay.c
                                         ${CMAKE_CURRENT_BINARY_DIR}/planted/wheel_planted.c)
target_include_directories(fuzz_replay_wheel_planted PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}
                                                             ${PROJECT_SOURCE_DIR}/src
                                                             ${PROJECT_SOURCE_DIR}/include)
add_test(NAME fuzz-replay/wheel-planted
         COMMAND fuzz_replay_wheel_planted --expect-mismatch ${CMAKE_CURRENT_SOURCE_DIR}/corpus/wheel)
set_tests_properties(fuzz-replay/wheel-planted PROPERTIES
                     TIMEOUT ${TMO_TEST_TIMEOUT}
                     PASS_REGULAR_EXPRESSION "fuzz mismatch[^\n]*early")
