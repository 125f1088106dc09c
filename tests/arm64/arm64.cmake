# The arm64 cross build (preset arm64, docs/arm64.md).  Included by
# tests/CMakeLists.txt.  In a cross build every test executable of this
# directory runs under the emulator, also where a script runs it
# (cmake/cross_run.cmake): wrapped once this directory is complete.
cmake_language(DEFER CALL tmo_cross_wrap_here)

# Under qemu-user a test that needs what qemu-user does not emulate exits
# 77 with its reason (tests/kit/qemu.h): a skip, never a pass.
function(tmo_cross_skips)
  if(NOT (CMAKE_CROSSCOMPILING AND CMAKE_CROSSCOMPILING_EMULATOR))
    return()
  endif()
  get_property(tests DIRECTORY PROPERTY TESTS)
  set_tests_properties(${tests} PROPERTIES SKIP_RETURN_CODE 77)
endfunction()
cmake_language(DEFER CALL tmo_cross_skips)
