# Timeout scopes through the harness: the skip-rescue truth table, nesting
# and edge-of-deadline race, and the actors word count with its
# message/timeout race, CI-sized (--quick), against every engine.  Both are
# correctness scenarios: any violation makes the harness exit 1.
# (tests/engine_scope.c is registered by its file name.)
if(TARGET tmo-harness)
  foreach(scen skip-rescue actors)
    foreach(engine IN LISTS TMO_ENGINES)
      add_test(NAME harness-${scen}/${engine}
               COMMAND $<TARGET_FILE:tmo-harness> --impl=${engine} --scenario=${scen} --quick)
      set_tests_properties(harness-${scen}/${engine} PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
    endforeach()
  endforeach()
endif()
