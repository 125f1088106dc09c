# Sanitizer fixtures.  Included by tests/CMakeLists.txt (all tests/*.cmake).
#
# TSan build only (TMO_TSAN=ON, preset `tsan`):
#   tsan/seeded_race          a toy timer with a real data race (seeded_race.c);
#                             WILL_FAIL: passes only if TSan makes it exit
#                             non-zero, i.e. CI proves the race check can fail.
#   tsan/seeded_race_report   the same run must print TSan's data-race report
#                             naming both racing functions (a crash would also
#                             satisfy WILL_FAIL; this one would not pass).
#   tsan/ck_override_clean    a correct CK program (ck_tsan_proof.c) built
#                             with the CK header override: must report nothing.
#   tsan/ck_system_headers    the same program built against the system CK
#                             headers: TSan must report (false) races there,
#                             showing the override is what makes the build
#                             clean.  If a future toolchain stops reporting,
#                             this fails and the override can be reconsidered.
#
# ASan build only (CMAKE_C_FLAGS has -fsanitize=...address..., preset `asan`):
#   asan/seeded_{leak,uaf,overflow}         seeded_asan.c with one seeded bug
#                                           each; WILL_FAIL: LSan, ASan and
#                                           UBSan must each make it fail.
#   asan/seeded_{leak,uaf,overflow}_report  the same run must print that
#                                           sanitizer's own report.
if(TMO_TSAN)
  set(_tsan_env "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1")

  add_executable(seeded_race ${CMAKE_CURRENT_LIST_DIR}/race.c)
  target_link_libraries(seeded_race PRIVATE Threads::Threads)
  add_test(NAME tsan/seeded_race COMMAND seeded_race 20)
  add_test(NAME tsan/seeded_race_report COMMAND seeded_race 20)
  set_tests_properties(tsan/seeded_race PROPERTIES WILL_FAIL TRUE)
  set_tests_properties(tsan/seeded_race_report PROPERTIES
    PASS_REGULAR_EXPRESSION
      "WARNING: ThreadSanitizer: data race.*(toy_fire.*toy_cancel|toy_cancel.*toy_fire)")

  add_executable(ck_tsan_proof ${CMAKE_CURRENT_LIST_DIR}/ck_tsan_proof.c)
  target_link_libraries(ck_tsan_proof PRIVATE Threads::Threads)
  add_test(NAME tsan/ck_override_clean COMMAND ck_tsan_proof)

  add_executable(ck_tsan_proof_system ${CMAKE_CURRENT_LIST_DIR}/ck_tsan_proof.c)
  target_link_libraries(ck_tsan_proof_system PRIVATE Threads::Threads)
  # Drop the directory-wide override include: this one sees /usr/include.
  set_property(TARGET ck_tsan_proof_system PROPERTY INCLUDE_DIRECTORIES "")
  add_test(NAME tsan/ck_system_headers COMMAND ck_tsan_proof_system)
  set_tests_properties(tsan/ck_system_headers PROPERTIES
    PASS_REGULAR_EXPRESSION "WARNING: ThreadSanitizer: data race")

  set_tests_properties(tsan/seeded_race tsan/seeded_race_report tsan/ck_override_clean
                       tsan/ck_system_headers PROPERTIES
    ENVIRONMENT "${_tsan_env}" TIMEOUT 60 LABELS "sanitizer;tsan")
endif()

if(CMAKE_C_FLAGS MATCHES "-fsanitize=[^ ]*address")
  set(_asan_env
    "ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1"
    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  add_executable(seeded_asan ${CMAKE_CURRENT_LIST_DIR}/asan.c)
  set(_kinds leak uaf overflow)
  set(_report_leak "ERROR: LeakSanitizer: detected memory leaks")
  set(_report_uaf "ERROR: AddressSanitizer: heap-use-after-free")
  set(_report_overflow "runtime error: signed integer overflow")
  foreach(kind IN LISTS _kinds)
    add_test(NAME asan/seeded_${kind} COMMAND seeded_asan ${kind})
    add_test(NAME asan/seeded_${kind}_report COMMAND seeded_asan ${kind})
    set_tests_properties(asan/seeded_${kind} PROPERTIES WILL_FAIL TRUE)
    set_tests_properties(asan/seeded_${kind}_report PROPERTIES
      PASS_REGULAR_EXPRESSION "${_report_${kind}}")
    set_tests_properties(asan/seeded_${kind} asan/seeded_${kind}_report PROPERTIES
      ENVIRONMENT "${_asan_env}" TIMEOUT 60 LABELS "sanitizer;asan")
  endforeach()
endif()
