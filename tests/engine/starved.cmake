# starved/<engine> needs two CPUs and a SCHED_FIFO spinner: without them it
# exits 77 (skipped, with the reason).  Its spinner holds one CPU for 40 ms
# at a time: one such test at a time.
foreach(engine IN LISTS TMO_ENGINES)
  if(TEST starved/${engine})
    set_tests_properties(starved/${engine} PROPERTIES SKIP_RETURN_CODE 77
                         RESOURCE_LOCK tmo_cpu_starved)
  endif()
endforeach()
