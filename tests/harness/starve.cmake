# Order under starvation (issue 19, tests/harness/starve.sh): the expiry
# scenario, whose order check is guarantee 4, beside more CPU hogs than
# CPUs, on every engine: the timer thread falls behind and order must hold
# (lateness grows; it is reported, not judged).  Full size (1e6 timers;
# TMO_TEST_SCALE shrinks it under a sanitizer: the TSan build's run under
# load) for the lock-free engines, whose timer thread files what arms
# publish and fell out of order there; --quick for the others.  RUN_SERIAL:
# the hogs would slow every test beside them, and those beside would blur
# the load this one makes.
if(TARGET tmo-harness)
  set(TMO_STARVE_RUNS 2 CACHE STRING "runs of each starve/ test (tests/harness/starve.sh)")
  foreach(engine IN LISTS TMO_ENGINES)
    set(size --quick)
    if(engine MATCHES "^(mpsc|wheel)$")
      set(size "")
    endif()
    add_test(NAME starve-expiry/${engine}
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/starve.sh $<TARGET_FILE:tmo-harness>
                     ${TMO_STARVE_RUNS} --impl=${engine} --scenario=expiry ${size})
    set_tests_properties(starve-expiry/${engine} PROPERTIES
                         TIMEOUT ${TMO_TEST_TIMEOUT} RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
  endforeach()
endif()
