# The posix engine's kernel timers count against RLIMIT_SIGPENDING, which is
# per USER, not per process: destroy/posix takes every timer it can get, and
# any other posix test running beside it (ctest -j) would then see TMO_EAGAIN
# on its first arm.  Every test that drives the posix engine takes one lock,
# so ctest runs them one at a time (and beside anything else).  Deferred to
# the end of this directory so it also sees tests added by other tests/*.cmake.
#
# The lock cannot reach other processes of the same user (another build's
# ctest, a benchmark): a test that is refused a per-user kernel resource
# while other processes hold all of it says so and exits 77, which ctest
# reports as skipped, not failed (unit/posix; lifecycle/* and
# lifecycle_fork/*, on every engine: tests/engine/lifecycle.h).
function(tmo_posix_resource_lock)
  get_property(all DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTY TESTS)
  foreach(t IN LISTS all)
    if(t MATCHES "/posix$")
      set_property(TEST ${t} APPEND PROPERTY RESOURCE_LOCK tmo_posix_kernel_timers)
    endif()
    if(t MATCHES "/posix$" OR t MATCHES "^lifecycle(_fork)?/")
      set_property(TEST ${t} PROPERTY SKIP_RETURN_CODE 77)
    endif()
  endforeach()
endfunction()
cmake_language(DEFER CALL tmo_posix_resource_lock)
