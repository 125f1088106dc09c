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
