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

# The arm64 build catches an x86 intrinsic on an arm64 path: the defects
# of issue 23 planted in a scratch copy of src/ fail to compile with the
# preset's compiler and flags; the files as they are compile.
if(CMAKE_CROSSCOMPILING AND TMO_ARM64_SYSROOT)
  add_test(NAME arm64/catches_x86_intrinsic
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/catches.sh ${PROJECT_SOURCE_DIR}
                   ${TMO_ARM64_SYSROOT} ${CMAKE_CURRENT_BINARY_DIR}/arm64_catches)
  set_tests_properties(arm64/catches_x86_intrinsic PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
endif()

# tests/arm64/qemu-skips.txt: what qemu-user cannot run, with the reason.
set(TMO_QEMU_SKIPS ${CMAKE_CURRENT_LIST_DIR}/qemu-skips.txt)
function(tmo_qemu_skips)
  if(NOT (CMAKE_CROSSCOMPILING AND CMAKE_CROSSCOMPILING_EMULATOR))
    return()
  endif()
  get_property(tests DIRECTORY PROPERTY TESTS)
  file(STRINGS ${TMO_QEMU_SKIPS} rows REGEX "^(skip|disable)[|]")
  foreach(row IN LISTS rows)
    string(REGEX MATCH "^([a-z]+)[|]([^|]+)[|](.*)$" m "${row}")
    set(how ${CMAKE_MATCH_1})
    set(re "${CMAKE_MATCH_2}")
    set(why "${CMAKE_MATCH_3}")
    foreach(t IN LISTS tests)
      if(NOT t MATCHES "${re}")
        continue()
      endif()
      if(how STREQUAL "skip")
        set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "TMO_QEMU_SKIP=${why}")
      else()
        set_tests_properties(${t} PROPERTIES DISABLED TRUE)
      endif()
    endforeach()
  endforeach()
endfunction()
cmake_language(DEFER CALL tmo_qemu_skips)

# tests/arm64/qemu-quick.txt: the tests the default arm64 step runs under
# qemu (label arm64-quick, `ctest -L arm64-quick`); the label is set in
# every build, so a native arm64 machine can run the same set.
set(TMO_QEMU_QUICK ${CMAKE_CURRENT_LIST_DIR}/qemu-quick.txt)
function(tmo_qemu_quick)
  get_property(tests DIRECTORY PROPERTY TESTS)
  file(STRINGS ${TMO_QEMU_QUICK} rows REGEX "^[^#]")
  foreach(row IN LISTS rows)
    string(REGEX MATCH "^([^ \t]+)" m "${row}")
    set(re "${CMAKE_MATCH_1}")
    set(hit OFF)
    foreach(t IN LISTS tests)
      if(t MATCHES "${re}")
        set_property(TEST ${t} APPEND PROPERTY LABELS arm64-quick)
        set(hit ON)
      endif()
    endforeach()
    # a row that names no test (a renamed test) is an error, not a silent
    # hole in the step: except the arm64-only test, absent from native builds
    if(NOT hit AND NOT re MATCHES "^\\^arm64/")
      message(FATAL_ERROR "tests/arm64/qemu-quick.txt: '${re}' matches no test")
    endif()
  endforeach()
endfunction()
cmake_language(DEFER CALL tmo_qemu_quick)
