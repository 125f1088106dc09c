# Fuzzing the data structures (src/ds/heap.c, src/ds/wheel.c) and the lock-free
# core (src/lf/, the mpsc and wheel engines): tests/fuzz/<t>.c each define
# LLVMFuzzerTestOneInput, which decodes bytes into timer operations and
# aborts on any mismatch with a reference model (heap, wheel: on a virtual
# clock; lf: on a live engine whose timer thread it parks and settles).
#
#   Always (any compiler): fuzz_replay_<t> feeds every file of
#   tests/fuzz/corpus/<t>/ plus fixed pseudo-random inputs (TMO_FUZZ_REPLAY_RANDOM
#   each; lf, whose inputs settle a live engine, TMO_FUZZ_REPLAY_RANDOM_LF)
#   to the same function; ctest "fuzz-replay/<t>".  So every build exercises
#   the corpus.
#
#   TMO_FUZZ=ON (clang only; preset "fuzz", `scripts/check fuzz`): fuzz_<t>,
#   the libFuzzer binary, built with -fsanitize=fuzzer,address,undefined.
#   Its structure's sources are compiled into it (not linked from libtmo) so
#   they carry the fuzzer's coverage instrumentation: for lf, the core and
#   the two engines with what they need, behind a registry of those two.
set(TMO_FUZZ_TARGETS heap wheel lf)
set(TMO_FUZZ_REPLAY_RANDOM 2000 CACHE STRING "random inputs each fuzz-replay test adds")
set(TMO_FUZZ_REPLAY_RANDOM_LF 150 CACHE STRING "random inputs fuzz-replay/lf adds")
set(tmo_fuzz_src_heap ${PROJECT_SOURCE_DIR}/src/ds/heap.c ${PROJECT_SOURCE_DIR}/src/core/alloc.c)
set(tmo_fuzz_src_wheel ${PROJECT_SOURCE_DIR}/src/ds/wheel.c)

# lf: the core and its two engines (tmo_lf_core_src, tests/CMakeLists.txt).
set(tmo_fuzz_src_lf ${tmo_lf_core_src})
set(tmo_fuzz_libs_lf PkgConfig::CK rt)
# The parts a target's <t>.c is built with, in every build of it (the
# replay, the libFuzzer binary, the planted variants): lf's model, pool
# audit and threads (tests/fuzz/lf_fuzz.h).
set(tmo_fuzz_parts_lf ${CMAKE_CURRENT_LIST_DIR}/lf_model.c ${CMAKE_CURRENT_LIST_DIR}/lf_pool.c
                      ${CMAKE_CURRENT_LIST_DIR}/lf_threads.c)

if(TMO_FUZZ AND NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "TMO_FUZZ needs clang (libFuzzer); use the 'fuzz' preset")
endif()

foreach(t IN LISTS TMO_FUZZ_TARGETS)
  add_executable(fuzz_replay_${t} ${CMAKE_CURRENT_LIST_DIR}/${t}.c ${tmo_fuzz_parts_${t}}
                                  ${CMAKE_CURRENT_LIST_DIR}/replay.c)
  target_include_directories(fuzz_replay_${t} PRIVATE ${CMAKE_CURRENT_LIST_DIR}
                                                      ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(fuzz_replay_${t} PRIVATE tmo)
  set(random ${TMO_FUZZ_REPLAY_RANDOM})
  if(t STREQUAL "lf")
    set(random ${TMO_FUZZ_REPLAY_RANDOM_LF})
  endif()
  add_test(NAME fuzz-replay/${t}
           COMMAND fuzz_replay_${t} --random ${random} ${CMAKE_CURRENT_LIST_DIR}/corpus/${t})
  set_tests_properties(fuzz-replay/${t} PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})

  if(TMO_FUZZ)
    add_executable(fuzz_${t} ${CMAKE_CURRENT_LIST_DIR}/${t}.c ${tmo_fuzz_parts_${t}}
                             ${tmo_fuzz_src_${t}})
    target_include_directories(fuzz_${t} PRIVATE ${CMAKE_CURRENT_LIST_DIR}
                                                 ${PROJECT_SOURCE_DIR}/src
                                                 ${PROJECT_SOURCE_DIR}/include)
    target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer,address,undefined
                                             -fno-sanitize-recover=undefined
                                             -fno-omit-frame-pointer -g)
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(fuzz_${t} PRIVATE Threads::Threads ${tmo_fuzz_libs_${t}})
  endif()
endforeach()

# The replay must be able to fail.  A copy of src/ds/wheel.c with its round-up
# removed (deadlines rounded DOWN to a tick: timers fire early) is generated
# into the build tree and built into fuzz_replay_wheel_planted; ctest
# fuzz-replay/wheel-planted passes only when the corpus replay reports that
# mismatch.  Configuring fails if the line to plant the bug in is gone.
set(tmo_wheel_c ${PROJECT_SOURCE_DIR}/src/ds/wheel.c)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${tmo_wheel_c})
file(READ ${tmo_wheel_c} tmo_wheel_src)
set(tmo_roundup "return q + (rem != 0);")
string(FIND "${tmo_wheel_src}" "${tmo_roundup}" tmo_at)
if(tmo_at EQUAL -1)
  message(FATAL_ERROR "tests/fuzz/fuzz.cmake: '${tmo_roundup}' (the round-up to break) "
                      "is not in src/ds/wheel.c any more: update the planted bug")
endif()
string(REPLACE "${tmo_roundup}" "return q; /* PLANTED BUG: rounds down */"
       tmo_wheel_src "${tmo_wheel_src}")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/planted/wheel_planted.c.tmp "${tmo_wheel_src}")
configure_file(${CMAKE_CURRENT_BINARY_DIR}/planted/wheel_planted.c.tmp
               ${CMAKE_CURRENT_BINARY_DIR}/planted/wheel_planted.c COPYONLY)
add_executable(fuzz_replay_wheel_planted ${CMAKE_CURRENT_LIST_DIR}/wheel.c
                                         ${CMAKE_CURRENT_LIST_DIR}/replay.c
                                         ${CMAKE_CURRENT_BINARY_DIR}/planted/wheel_planted.c)
target_include_directories(fuzz_replay_wheel_planted PRIVATE ${CMAKE_CURRENT_LIST_DIR}
                                                             ${PROJECT_SOURCE_DIR}/src
                                                             ${PROJECT_SOURCE_DIR}/include)
add_test(NAME fuzz-replay/wheel-planted
         COMMAND fuzz_replay_wheel_planted --expect-mismatch ${CMAKE_CURRENT_LIST_DIR}/corpus/wheel)
set_tests_properties(fuzz-replay/wheel-planted PROPERTIES
                     TIMEOUT ${TMO_TEST_TIMEOUT}
                     PASS_REGULAR_EXPRESSION "fuzz mismatch[^\n]*early")

# The lf replay must be able to fail, twice over: each planted variant is a
# copy of one src/lf file with one statement broken, generated into the
# build tree and compiled with the rest of the core into
# fuzz_replay_<name>; ctest fuzz-replay/<name> passes only when the corpus
# replay reports the mismatch that the bug must cause (the regex names the
# check).  Configuring fails if the text to break is gone.
#   lf-planted       fire.c: a fire leaves the timer's word PENDING instead
#                    of FIRED -- the model sees a fired timer whose word,
#                    cancel or arm (its callback's re-arm first) do not know
#                    it has fired.
#   lf-leak-planted  cancel.c: a cancel that takes back its own ring arm reports
#                    PREVENTED but never returns the node -- only the pool
#                    audit can see it (a leak at the end of a draining input).
# The core as the planted replays build it, compiled once: each takes these
# objects but the one of the file it breaks.
add_library(tmo_fuzz_lf_core OBJECT ${tmo_fuzz_src_lf})
target_include_directories(tmo_fuzz_lf_core PRIVATE ${PROJECT_SOURCE_DIR}/src
                                                    ${PROJECT_SOURCE_DIR}/src/lf
                                                    ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(tmo_fuzz_lf_core PRIVATE ${tmo_fuzz_libs_lf})

function(tmo_lf_planted name file pattern replacement regex)
  set(src ${PROJECT_SOURCE_DIR}/src/lf/${file})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${src})
  file(READ ${src} text)
  string(FIND "${text}" "${pattern}" first)
  string(FIND "${text}" "${pattern}" last REVERSE)
  if(first EQUAL -1 OR NOT first EQUAL last)
    message(FATAL_ERROR "tests/fuzz/fuzz.cmake: the text to break for ${name} is not in "
                        "src/lf/${file} exactly once any more: update the planted bug")
  endif()
  string(REPLACE "${pattern}" "${replacement}" text "${text}")
  set(out ${CMAKE_CURRENT_BINARY_DIR}/planted/${name}/${file})
  file(WRITE ${out}.tmp "${text}")
  configure_file(${out}.tmp ${out} COPYONLY)
  tmo_objects_except(core tmo_fuzz_lf_core ${src})
  add_executable(fuzz_replay_${name} ${CMAKE_CURRENT_LIST_DIR}/lf.c ${tmo_fuzz_parts_lf}
                                     ${CMAKE_CURRENT_LIST_DIR}/replay.c ${core} ${out})
  target_include_directories(fuzz_replay_${name} PRIVATE ${CMAKE_CURRENT_LIST_DIR}
                             ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/src/lf
                             ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(fuzz_replay_${name} PRIVATE Threads::Threads ${tmo_fuzz_libs_lf})
  add_test(NAME fuzz-replay/${name}
           COMMAND fuzz_replay_${name} --expect-mismatch ${CMAKE_CURRENT_LIST_DIR}/corpus/lf)
  set_tests_properties(fuzz-replay/${name} PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT}
                       PASS_REGULAR_EXPRESSION "${regex}")
endfunction()

tmo_lf_planted(lf-planted fire.c
  "lf_word(lf_idx_of(e, n), d->gen, LF_FIRED)"
  "lf_word(lf_idx_of(e, n), d->gen, LF_PENDING) /* PLANTED BUG: no FIRED word */"
  "fuzz mismatch[^\n]*(\\(fired\\)|re-arm returned TMO_EARMED)")
tmo_lf_planted(lf-leak-planted cancel.c
  "\tn->free_next = r->cache;\n\tr->cache = n;\n\tr->cache_n++;\n\treturn TMO_CANCEL_PREVENTED;"
  "\treturn TMO_CANCEL_PREVENTED; /* PLANTED BUG: the node is not taken back */"
  "fuzz mismatch[^\n]*a leak")
