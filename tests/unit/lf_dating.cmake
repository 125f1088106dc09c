# unit/lf_dating exits 77 (skipped, with the reason) where the lock-free
# timer thread polls every tick (LF_TW_FENCE: no membarrier, or TSan).
set_tests_properties(unit/lf_dating PROPERTIES SKIP_RETURN_CODE 77)
