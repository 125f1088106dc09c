# The lock-free core's fallback where membarrier(2) is missing: every arm
# fences before it reads the tick word (src/lf/clock.c).  Outside TSan
# (which always takes it) nothing else runs it; TMO_LF_FENCE=1 forces it
# for the lock-free unit tests (which check that it is what ran) and for
# the contract (every contract*.c test) of both engines built on the core.
add_test(NAME unit/lf_fence COMMAND test_unit_lf)
set(tmo_fence_tests unit/lf_fence)
foreach(t contract contract_cancel contract_lifetime)
  foreach(engine mpsc wheel)
    add_test(NAME ${t}/${engine}_fence COMMAND test_engine_${t} ${engine})
    list(APPEND tmo_fence_tests ${t}/${engine}_fence)
  endforeach()
endforeach()
set_tests_properties(${tmo_fence_tests} PROPERTIES
                     TIMEOUT ${TMO_TEST_TIMEOUT} ENVIRONMENT TMO_LF_FENCE=1)
# The clock path: where the CPU's counter is not usable (no invariant TSC,
# an arm64 kernel that traps EL0 counter reads) arms stamp with
# CLOCK_MONOTONIC (src/lf/clock.c).  x86 here and arm64 under qemu always
# take the counter; TMO_LF_CLOCK=1 forces the clock for the lock-free unit
# tests (which check that it is what ran) and the contract of both engines.
add_test(NAME unit/lf_clock COMMAND test_unit_lf)
set(tmo_clock_tests unit/lf_clock)
foreach(t contract contract_cancel)
  foreach(engine mpsc wheel)
    add_test(NAME ${t}/${engine}_clock COMMAND test_engine_${t} ${engine})
    list(APPEND tmo_clock_tests ${t}/${engine}_clock)
  endforeach()
endforeach()
set_tests_properties(${tmo_clock_tests} PROPERTIES
                     TIMEOUT ${TMO_TEST_TIMEOUT} ENVIRONMENT TMO_LF_CLOCK=1)
