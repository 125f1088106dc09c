# Timeout scopes through the harness: the skip-rescue truth table, nesting
# and edge-of-deadline race, and the actors word count with its
# message/timeout race, CI-sized (--quick), against every engine.  Both are
# correctness scenarios: any violation makes the harness exit 1.
# (tests/engine/scope.c is registered by its file name.)
if(TARGET tmo-harness)
  foreach(scen skip-rescue actors)
    foreach(engine IN LISTS TMO_ENGINES)
      add_test(NAME harness-${scen}/${engine}
               COMMAND $<TARGET_FILE:tmo-harness> --impl=${engine} --scenario=${scen} --quick)
      set_tests_properties(harness-${scen}/${engine} PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
    endforeach()
  endforeach()
endif()
# A shortage of a per-user kernel resource is a skip with a reason, not a
# failure: with no kernel timer to be had (RLIMIT_SIGPENDING 0) the posix
# engine cannot be created, and the run must say SKIPPED, why, and exit 77
# (scenarios/kit/sk.h, sk_skip).
if(TARGET tmo-harness)
  add_test(NAME harness/skip_rescue_short_of_kernel_timers
           COMMAND bash -c "ulimit -i 0 && \"$0\" --impl=posix --scenario=skip-rescue --quick >\"$1\" 2>&1; rc=$?; cat \"$1\"; test $rc -eq 77 && grep -q 'SKIPPED \\[skip-rescue/posix\\] .*TMO_EAGAIN' \"$1\""
                   $<TARGET_FILE:tmo-harness> ${CMAKE_CURRENT_BINARY_DIR}/skip_rescue_short.log)
  set_tests_properties(harness/skip_rescue_short_of_kernel_timers PROPERTIES
                       TIMEOUT ${TMO_TEST_TIMEOUT})
endif()
