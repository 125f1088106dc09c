# destroy/<engine> arms up to 1M timers (the thread engine: tens of
# thousands of OS threads; posix: this user's whole kernel-timer quota,
# RLIMIT_SIGPENDING, which every process of the user shares).  Run each alone
# so it neither starves nor is starved by the tests ctest runs beside it.
foreach(engine IN LISTS TMO_ENGINES)
  if(TEST destroy/${engine})
    set_tests_properties(destroy/${engine} PROPERTIES RUN_SERIAL TRUE)
  endif()
endforeach()
