# The cancel-deadlock check is what prevents the hang (tests/engine/deadlock.c):
# with it switched off (tmo_testing_deadlock_check(0)) each engine's
# same-kind pair, whose callbacks cancel each other's timers, hangs, and
# the test's watchdog must end it, naming the hang, within 2 s.  Passes only
# on the watchdog's line; a run that does not hang prints no such line and
# fails.  Included by tests/CMakeLists.txt.
foreach(engine IN LISTS TMO_ENGINES)
  tmo_engine_test_wanted(deadlock_unchecked ${engine} want)
  if(NOT want)
    continue()
  endif()
  add_test(NAME deadlock_unchecked/${engine}
           COMMAND test_engine_deadlock --no-check ${engine})
  set_tests_properties(deadlock_unchecked/${engine} PROPERTIES
                       PASS_REGULAR_EXPRESSION "WATCHDOG: pair ${engine}/${engine}, check off: 2 callbacks started, 0 finished after 2 s: the cancels deadlocked"
                       TIMEOUT ${TMO_TEST_TIMEOUT})
endforeach()
