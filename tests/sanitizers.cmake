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
if(TMO_TSAN)
  set(_tsan_env "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1")

  add_executable(seeded_race ${CMAKE_CURRENT_SOURCE_DIR}/seeded_race.c)
  target_link_libraries(seeded_race PRIVATE Threads::Threads)
  add_test(NAME tsan/seeded_race COMMAND seeded_race)
  add_test(NAME tsan/seeded_race_report COMMAND seeded_race)
  set_tests_properties(tsan/seeded_race PROPERTIES WILL_FAIL TRUE)
  set_tests_properties(tsan/seeded_race_report PROPERTIES
    PASS_REGULAR_EXPRESSION
      "WARNING: ThreadSanitizer: data race.*(toy_fire.*toy_cancel|toy_cancel.*toy_fire)")

  add_executable(ck_tsan_proof ${CMAKE_CURRENT_SOURCE_DIR}/ck_tsan_proof.c)
  target_link_libraries(ck_tsan_proof PRIVATE Threads::Threads)
  add_test(NAME tsan/ck_override_clean COMMAND ck_tsan_proof)

  add_executable(ck_tsan_proof_system ${CMAKE_CURRENT_SOURCE_DIR}/ck_tsan_proof.c)
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
