# Order under starvation (issue 19, tests/harness/starve.sh): the expiry
# scenario, whose order check is guarantee 4, beside more CPU hogs than
# CPUs: the engine's threads fall behind and order must hold (lateness
# grows; it is reported, not judged).  At TMO_TEST_SCALE=0.1 (1e5 timers
# over 1 s): beside the hogs mpsc's timer thread falls 0.1-1 s behind on a
# 2-CPU machine, and the planted defect (TMO_LF_PLANT_ORDER, starve.sh)
# fails the first run.  mpsc and wheel (a timer thread files what arms
# publish: where it broke) run TMO_STARVE_RUNS times; every other engine
# once: thread and posix (kernel-timed, minutes at that size beside the
# hogs), glib (4,096 sources at most, each arm refused past them waits),
# timerfd and uring (a kernel timer per arm) at --quick.  The peers' loop
# thread falls behind the same way (src/peer/records.c, tmo__peer_run_due;
# the case itself, deterministic, is unit/peer_order).  The TSan build runs
# mpsc and wheel once (the run CI went red on, under load); the ASan build
# none.  RUN_SERIAL: the hogs would slow every test beside them, and those
# beside would blur the load.
if(TARGET tmo-harness AND NOT CMAKE_C_FLAGS MATCHES "sanitize=address")
  set(TMO_STARVE_RUNS 2 CACHE STRING "runs of starve-expiry/{mpsc,wheel} (tests/harness/starve.sh)")
  foreach(engine IN LISTS TMO_ENGINES)
    set(runs 1)
    set(size "")
    if(engine MATCHES "^(mpsc|wheel)$" AND NOT TMO_TSAN)
      set(runs ${TMO_STARVE_RUNS})
    elseif(TMO_TSAN AND NOT engine MATCHES "^(mpsc|wheel)$")
      continue()
    elseif(engine MATCHES "^(thread|posix|glib|timerfd|uring)$")
      set(size --quick)
    endif()
    add_test(NAME starve-expiry/${engine}
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/starve.sh $<TARGET_FILE:tmo-harness> ${runs}
                     --impl=${engine} --scenario=expiry ${size})
    set_tests_properties(starve-expiry/${engine} PROPERTIES
                         ENVIRONMENT TMO_TEST_SCALE=0.1 TIMEOUT 600 RUN_SERIAL TRUE
                         SKIP_RETURN_CODE 77)
  endforeach()
endif()
