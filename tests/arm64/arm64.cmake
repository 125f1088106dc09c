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
function(tmo_qemu_skips)
  if(NOT (CMAKE_CROSSCOMPILING AND CMAKE_CROSSCOMPILING_EMULATOR))
    return()
  endif()
  get_property(tests DIRECTORY PROPERTY TESTS)
  file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/qemu-skips.txt rows REGEX "^(skip|disable)[|]")
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
