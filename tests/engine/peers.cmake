# faults/<engine> makes a fresh engine and arms 2,000 timers for each of
# some 800 fault points; timerfd pays timerfd_create + epoll_ctl + settime
# for each new record (about 7 system calls per timer in all), which took
# 103-123 s on the 2-core VM under load: more than the default timeout.
foreach(engine timerfd uring)
  if(TEST faults/${engine})
    set_tests_properties(faults/${engine} PROPERTIES TIMEOUT 360)
  endif()
endforeach()
