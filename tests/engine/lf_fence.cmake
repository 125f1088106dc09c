# The lock-free core's fallback where membarrier(2) is missing: every arm
# fences before it reads the tick word (src/lf/clock.c).  Outside TSan
# (which always takes it) nothing else runs it; TMO_LF_FENCE=1 forces it
# for the lock-free unit tests (which check that it is what ran) and for
# the contract of both engines built on the core.
add_test(NAME unit/lf_fence COMMAND test_unit_lf)
add_test(NAME contract/mpsc_fence COMMAND test_engine_contract mpsc)
add_test(NAME contract/wheel_fence COMMAND test_engine_contract wheel)
set_tests_properties(unit/lf_fence contract/mpsc_fence contract/wheel_fence PROPERTIES
                     TIMEOUT ${TMO_TEST_TIMEOUT} ENVIRONMENT TMO_LF_FENCE=1)
