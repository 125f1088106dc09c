# Engines from outside the library (tmo/engine.h, examples/engine/).
#
# examples/bad/<case>: shared objects that are no engine (bad_engine.c, one
# per -DBAD=), a missing file and a file that is no shared object: the
# harness and an engine test each refuse them with exit 3 and the loader's
# named error (refused.sh).
set(tmo_bad_engines "nosym\;1\;TMO_LOAD_ENOSYM" "abi\;2\;TMO_LOAD_EABI"
    "nullslot\;3\;TMO_LOAD_ETABLE.*slot cancel is NULL" "noname\;4\;TMO_LOAD_ETABLE.*no name"
    "badcaps\;5\;TMO_LOAD_ETABLE.*caps 0x8" "builtin\;6\;TMO_LOAD_ETABLE.*taken"
    "parkless\;7\;TMO_LOAD_ETABLE.*no testing->park")
set(tmo_refused ${CMAKE_CURRENT_LIST_DIR}/refused.sh)
foreach(row IN LISTS tmo_bad_engines)
  list(GET row 0 name)
  list(GET row 1 bad)
  list(GET row 2 want)
  add_library(tmo_bad_${name} MODULE ${CMAKE_CURRENT_LIST_DIR}/bad_engine.c)
  target_compile_definitions(tmo_bad_${name} PRIVATE BAD=${bad})
  target_include_directories(tmo_bad_${name} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  set_target_properties(tmo_bad_${name} PROPERTIES PREFIX "" OUTPUT_NAME bad_${name})
  add_test(NAME examples/bad/${name}
           COMMAND ${tmo_refused} ${name} "${want}" $<TARGET_FILE:tmo-harness>
                   --impl=$<TARGET_FILE:tmo_bad_${name}> --scenario=smoke --quick)
  add_test(NAME examples/bad/${name}_test
           COMMAND ${tmo_refused} ${name} "${want}" $<TARGET_FILE:test_engine_contract>
                   $<TARGET_FILE:tmo_bad_${name}>)
endforeach()
# scripts/conform stops at once on a file that is no engine: exit 3, named.
add_test(NAME examples/bad/conform_nosym
         COMMAND ${tmo_refused} conform_nosym "TMO_LOAD_ENOSYM" ${PROJECT_SOURCE_DIR}/scripts/conform
                 --build=${PROJECT_BINARY_DIR} $<TARGET_FILE:tmo_bad_nosym>)
add_test(NAME examples/bad/nofile
         COMMAND ${tmo_refused} nofile "TMO_LOAD_ENOFILE.*no such file" $<TARGET_FILE:tmo-harness>
                 --impl=${CMAKE_CURRENT_BINARY_DIR}/no_such_engine.so)
add_test(NAME examples/bad/notelf
         COMMAND ${tmo_refused} notelf "TMO_LOAD_EDLOPEN" $<TARGET_FILE:tmo-harness>
                 --impl=${CMAKE_CURRENT_LIST_DIR}/refused.sh)

# examples/unavail: an engine that loads but whose create answers
# TMO_EUNAVAIL (bad_engine.c, BAD=8: its kernel facility missing here, as
# uring's under qemu-user or a seccomp that denies io_uring): every
# scenario skips it with that error named, and the harness exits 77.
add_library(tmo_bad_unavail MODULE ${CMAKE_CURRENT_LIST_DIR}/bad_engine.c)
target_compile_definitions(tmo_bad_unavail PRIVATE BAD=8)
target_include_directories(tmo_bad_unavail PRIVATE ${PROJECT_SOURCE_DIR}/include)
set_target_properties(tmo_bad_unavail PROPERTIES PREFIX "" OUTPUT_NAME bad_unavail)
add_test(NAME examples/unavail
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/unavail.sh $<TARGET_FILE:tmo-harness>
                 $<TARGET_FILE:tmo_bad_unavail>)

# A shared object's --impl word is copied (a child harness names it
# again): a bad --scenario after it is exit 2, nothing leaked (the asan
# build's LeakSanitizer turned it into exit 1 before the copy was freed).
add_test(NAME examples/bad/scenario_after_so
         COMMAND sh -c "\"$0\" --impl=\"$1\" --scenario=nosuch; test $? -eq 2"
                 $<TARGET_FILE:tmo-harness> $<TARGET_FILE:tmo_bad_unavail>)

# harness/instances: --repeat's instances each in a process of its own
# (scenarios/kit/instance.c): wheel's, merged and tagged; an engine whose
# create aborts (bad_engine.c, BAD=9), each dead instance a violation that
# names the signal; the unavailable engine above, skipped through its
# instances.  tests/harness/instances.sh.
add_library(tmo_bad_abort MODULE ${CMAKE_CURRENT_LIST_DIR}/bad_engine.c)
target_compile_definitions(tmo_bad_abort PRIVATE BAD=9)
target_include_directories(tmo_bad_abort PRIVATE ${PROJECT_SOURCE_DIR}/include)
set_target_properties(tmo_bad_abort PROPERTIES PREFIX "" OUTPUT_NAME bad_abort)
add_test(NAME harness/instances
         COMMAND bash ${PROJECT_SOURCE_DIR}/tests/harness/instances.sh $<TARGET_FILE:tmo-harness>
                 $<TARGET_FILE:tmo_bad_abort> $<TARGET_FILE:tmo_bad_unavail>)
set_tests_properties(harness/instances PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})

# examples/skewed/<variant>: guarantee 4's named limit (tmo.h).  The
# example built to run timers 2 ms late and the last due first: the expiry
# scenario must fail the variant that does it silently, and report the one
# that counts each such timer (tmo_stats' skewed) as that limit, passing.
set(tmo_skewed_rows "skewed\;3\;1\;VIOLATION.*order: a timer due"
    "skewed_named\;4\;0\;order: [0-9]+ timers ran late for order.*its named limit")
foreach(row IN LISTS tmo_skewed_rows)
  list(GET row 0 name)
  list(GET row 1 broken)
  list(GET row 2 rc)
  list(GET row 3 want)
  add_library(tmo_example_${name} MODULE ${PROJECT_SOURCE_DIR}/examples/engine/example.c)
  target_compile_definitions(tmo_example_${name} PRIVATE EXAMPLE_BROKEN=${broken})
  target_include_directories(tmo_example_${name} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  set_target_properties(tmo_example_${name} PROPERTIES PREFIX "" OUTPUT_NAME example_${name})
  add_test(NAME examples/skewed/${name}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/skewed.sh ${rc} "${want}" $<TARGET_FILE:tmo-harness>
                   --impl=$<TARGET_FILE:tmo_example_${name}> --scenario=expiry --quick)
  # 100 and 10,000 timers: the example's arm is O(n)
  set_tests_properties(examples/skewed/${name} PROPERTIES ENVIRONMENT TMO_TEST_SCALE=0.1)
endforeach()

# examples/conform/<variant>: examples/engine/ built against the INSTALLED
# headers and tmo.pc (`cmake --install` to a scratch prefix: conform.sh),
# then scripts/conform on it: the example must pass; each broken variant
# must fail, and conform must name the cases listed here among its failures.
# The example runs the whole suite (the engine tests, four --quick
# scenarios), the broken variants only the cases they must fail: one at a
# time (a lock), beside the rest of the suite.
# In the release and debug builds only: under a sanitizer the example's
# whole suite takes several times longer, and conform runs its own TSan pass
# wherever build/tsan exists.
if(NOT TMO_TSAN AND NOT CMAKE_C_FLAGS MATCHES "sanitize")
  set(tmo_conform ${CMAKE_CURRENT_LIST_DIR}/conform.sh)
  add_test(NAME examples/conform/example
           COMMAND ${tmo_conform} ${PROJECT_BINARY_DIR} ${CMAKE_C_COMPILER} "${CMAKE_C_FLAGS}" example)
  add_test(NAME examples/conform/early
           COMMAND ${tmo_conform} ${PROJECT_BINARY_DIR} ${CMAKE_C_COMPILER} "${CMAKE_C_FLAGS}"
                   example-early engine/contract scenario/expiry)
  add_test(NAME examples/conform/nowait
           COMMAND ${tmo_conform} ${PROJECT_BINARY_DIR} ${CMAKE_C_COMPILER} "${CMAKE_C_FLAGS}"
                   example-nowait engine/contract_cancel scenario/race)
  foreach(t example early nowait)
    set_tests_properties(examples/conform/${t} PROPERTIES TIMEOUT 1200
                         RESOURCE_LOCK tmo_conform)
  endforeach()
endif()
