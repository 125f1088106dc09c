# Cross builds (the arm64 preset): every executable the project builds is
# run through CMAKE_CROSSCOMPILING_EMULATOR (qemu-aarch64, cmake/aarch64.cmake).
# ctest puts the emulator only before a test command that names a target,
# but tests and scripts also run $<TARGET_FILE:...> through sh, bash and
# python (harness/*, checks_can_fail/*, scripts/*).  So after each link the
# binary moves to NAME.elf and NAME becomes a small shell script that execs
# the emulator on it (argv[0] kept); the target's own emulator is cleared,
# so that ctest runs the script like any other program.  The emulator gets
# TMO_UNDER_QEMU=1 in the guest's environment: a test that qemu-user cannot
# run (a system call or /proc view it lacks) skips, saying so.
# Included by the top-level CMakeLists.txt before its subdirectories.
# tmo_cross_wrap_here(): wraps the executables of the directory being
# processed (CMake 3.25 adds a POST_BUILD step only from a target's own
# directory): cli/CMakeLists.txt calls it at its end, tests/ defers it to
# its end (tests/arm64/arm64.cmake).  Nothing outside a cross build.
function(tmo_cross_wrap_here)
  if(NOT (CMAKE_CROSSCOMPILING AND CMAKE_CROSSCOMPILING_EMULATOR))
    return()
  endif()
  get_property(ts DIRECTORY PROPERTY BUILDSYSTEM_TARGETS)
  string(REPLACE ";" "|" emu "${CMAKE_CROSSCOMPILING_EMULATOR}")
  foreach(t IN LISTS ts)
    get_target_property(type ${t} TYPE)
    if(NOT type STREQUAL "EXECUTABLE")
      continue()
    endif()
    set_target_properties(${t} PROPERTIES CROSSCOMPILING_EMULATOR "")
    add_custom_command(TARGET ${t} POST_BUILD
      COMMAND ${CMAKE_COMMAND} -DBIN=$<TARGET_FILE:${t}> "-DEMU=${emu}"
              -P ${PROJECT_SOURCE_DIR}/cmake/cross_wrap.cmake
      VERBATIM)
  endforeach()
endfunction()
