# The harness CLI (cli/): its exit statuses and output.  The scenario runs
# (harness-<scenario>/<engine>) are rows of runs.txt (runs.cmake).  Included
# by tests/CMakeLists.txt.
if(TARGET tmo-harness)
  set(h $<TARGET_FILE:tmo-harness>)
  add_test(NAME harness/list COMMAND ${h} --list)
  add_test(NAME harness/help COMMAND ${h} --help)
  # Every scenario documents its parameters and what fails it (struct
  # sk_scenario params, fails_when), and docs/harness.md carries --help
  # verbatim: the check fails on a copy with one line of the block changed.
  set_tests_properties(harness/help PROPERTIES FAIL_REGULAR_EXPRESSION "not documented")
  add_test(NAME harness/help_matches_manual
           COMMAND ${PROJECT_SOURCE_DIR}/scripts/update-readme --check ${h})
  add_test(NAME harness/help_matches_manual_catches
           COMMAND sh -c "sed 's/^    --quick$/    --quik/' \"$0/docs/harness.md\" > \"$2\" &&
                          ! cmp -s \"$0/docs/harness.md\" \"$2\" &&
                          MANUAL=\"$2\" \"$0/scripts/update-readme\" --check \"$1\" > \"$2.out\" 2>&1;
                          rc=$?; cat \"$2.out\"; test $rc -eq 1 && grep -q '^-    --quik$' \"$2.out\""
                   ${PROJECT_SOURCE_DIR} ${h} ${CMAKE_CURRENT_BINARY_DIR}/manual_planted.md)
  # Every size a scenario reads is in its sizes table and every declared size
  # is read (sk_size aborts on an undeclared name, but only on the line that
  # runs); the fixture shows the check refuses a mismatch.
  add_test(NAME harness/sizes_declared
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/harness/sizes_declared.py
                   ${PROJECT_SOURCE_DIR})
  add_test(NAME harness/sizes_declared_catches
           COMMAND sh -c "out=$(/usr/bin/python3 \"$0/tests/harness/sizes_declared.py\" \"$0\" \"$0/tests/harness/sizes_fixture\"); rc=$?; echo \"$out\"; test $rc -eq 1 && echo \"$out\" | grep -q 'size count, which its sizes table does not declare'"
                   ${PROJECT_SOURCE_DIR})
  # Bad command lines exit with status 2 (not 1, which means a violation).
  foreach(case
      "unknown_flag|--bogus"
      "unknown_engine|--impl=no-such-engine"
      "unknown_scenario|--scenario=no-such-scenario"
      "unknown_benchmark_flag|--benchmark_no_such_flag=1"
      "benchmark_out|--benchmark_out=x.json"
      "bad_threads|--threads=0"
      "missing_value|--impl"
      "stray_argument|stray"
      "unwritable_json|--json=/nonexistent-dir/x.json")
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 arg)
    add_test(NAME harness/exit2_${name}
             COMMAND sh -c "\"$0\" \"$1\" >/dev/null 2>&1; test $? -eq 2" ${h} ${arg})
  endforeach()
  # Every numeric option takes digits only (cli/digits.h): a blank, a sign,
  # another character, an empty value, an overflow or a value out of range
  # is refused with exit 2 and named ("--seed=' -1': not a number ...");
  # strtoull alone read ' -1' as 18446744073709551615.
  foreach(case
      "seed_blank_minus|seed| -1|not a number"
      "seed_minus|seed|-1|not a number"
      "seed_plus|seed|+1|not a number"
      "seed_blank|seed| 1|not a number"
      "seed_trailing_blank|seed|1 |not a number"
      "seed_hex|seed|0x10|not a number"
      "seed_junk|seed|12abc|not a number"
      "seed_empty|seed||empty"
      "seed_overflow|seed|18446744073709551616|out of range"
      "seed_overflow_long|seed|99999999999999999999999|out of range"
      "threads_blank|threads| 4|not a number"
      "threads_minus|threads|-4|not a number"
      "threads_plus|threads|+4|not a number"
      "threads_junk|threads|4x|not a number"
      "threads_empty|threads||empty"
      "threads_zero|threads|0|out of range"
      "threads_above|threads|257|out of range"
      "threads_overflow|threads|18446744073709551617|out of range"
      "repeat_blank|repeat| 3|not a number"
      "repeat_minus|repeat|-3|not a number"
      "repeat_float|repeat|3.0|not a number"
      "repeat_empty|repeat||empty"
      "repeat_zero|repeat|0|out of range"
      "repeat_above|repeat|101|out of range")
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 opt)
    list(GET parts 2 val)
    list(GET parts 3 why)
    add_test(NAME harness/number_${name}
             COMMAND sh -c "\"$0\" \"--$1=$2\" >/dev/null 2>\"$4\"; rc=$?; cat \"$4\"; test $rc -eq 2 && grep -qF -- \"--$1='$2': $3\" \"$4\""
                     ${h} ${opt} "${val}" "${why}" ${CMAKE_CURRENT_BINARY_DIR}/number_${name}.log)
  endforeach()
  # Results are never lost (tests/harness/output.sh): interrupted runs,
  # write errors, stdout errors, the full seed range, short options.
  foreach(case interrupt_int interrupt_term complete json_write_error not_regular
               stdout_full stdout_closed seed_max short_option)
    add_test(NAME harness/output_${case}
             COMMAND bash ${PROJECT_SOURCE_DIR}/tests/harness/output.sh ${h} ${case})
    set_tests_properties(harness/output_${case} PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
  endforeach()
endif()

# The throughput scenario's rounds (seed, empty, floor, the structure's
# seed) run interleaved, each repetition numbered; the check fails on a
# copy renumbered as consecutive blocks (tests/harness/rounds.py).
if(TARGET tmo-harness)
  foreach(case pass catches)
    set(flag "")
    if(case STREQUAL "catches")
      set(flag "--catches")
    endif()
    add_test(NAME harness/rounds_interleaved_${case}
             COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/harness/rounds.py
                     $<TARGET_FILE:tmo-harness> ${CMAKE_CURRENT_BINARY_DIR} ${flag})
    set_tests_properties(harness/rounds_interleaved_${case} PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
  endforeach()
endif()

# tmo-seedloop's PAIRS is digits only too (cli/digits.h).
if(TARGET tmo-seedloop)
  foreach(case "blank| 5|not a number" "minus|-1|not a number" "junk|5x|not a number"
               "empty||empty" "overflow|99999999999999999999|out of range")
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 val)
    list(GET parts 2 why)
    add_test(NAME harness/seedloop_pairs_${name}
             COMMAND sh -c "\"$0\" wheel \"$1\" >/dev/null 2>\"$3\"; rc=$?; cat \"$3\"; test $rc -eq 2 && grep -qF -- \"PAIRS '$1': $2\" \"$3\""
                     $<TARGET_FILE:tmo-seedloop> "${val}" "${why}" ${CMAKE_CURRENT_BINARY_DIR}/seedloop_pairs_${name}.log)
  endforeach()
endif()

# The correctness checks can fail: broken fixture engines through the real
# race, expiry, coalesce and progress scenarios (tests/harness/fixtures.c),
# linked from the harness library (tmo_harness).  Their subject is the
# drivers' checks, which a build does not change: registered in the
# release build only (the sanitizer builds run the drivers on the real
# engines: runs.txt).  Under TSan and ASan they took 62 + 11 s of each
# step's test time (CI run 44, the 2-vCPU AMD box) of the 30 minutes.
if(TARGET tmo-harness AND NOT TMO_SANITIZED)
  add_executable(test_harness_fixtures ${PROJECT_SOURCE_DIR}/tests/harness/fixtures.c
                 ${PROJECT_SOURCE_DIR}/tests/fixtures/wrap.c)
  target_include_directories(test_harness_fixtures PRIVATE ${PROJECT_SOURCE_DIR}/tests/fixtures
                                                           ${PROJECT_SOURCE_DIR}/cli
                                                           ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(test_harness_fixtures PRIVATE tmo_harness)
  add_test(NAME harness/checks_can_fail COMMAND test_harness_fixtures)
  # One run as the harness makes it: progress on an engine that declares
  # lockfree-arm but whose arm waits while a callback runs must report the
  # callback phase's violation and exit 1.
  add_test(NAME harness/checks_can_fail_progress
           COMMAND sh -c "\"$0\" progress waitarm >\"$1\" 2>&1; rc=$?; cat \"$1\"; test $rc -eq 1 && grep -q 'yet in the callback phase' \"$1\""
                   $<TARGET_FILE:test_harness_fixtures> ${CMAKE_CURRENT_BINARY_DIR}/checks_can_fail_progress.log)
  set_tests_properties(harness/checks_can_fail harness/checks_can_fail_progress PROPERTIES
                       TIMEOUT ${TMO_TEST_TIMEOUT})
endif()

# A shortage of a per-user kernel resource is a skip with a reason, not a
# failure: with no kernel timer to be had (RLIMIT_SIGPENDING 0) the posix
# engine cannot be created, and the run must say SKIPPED, why, and exit 77
# (scenarios/kit/sk.h, sk_skip).
if(TARGET tmo-harness)
  add_test(NAME harness/skip_rescue_short_of_kernel_timers
           COMMAND bash -c "ulimit -i 0 && \"$0\" --impl=posix --scenario=skip-rescue --quick >\"$1\" 2>&1; rc=$?; cat \"$1\"; test $rc -eq 77 && grep -q 'SKIPPED \\[skip-rescue/posix\\] .*TMO_EAGAIN' \"$1\""
                   $<TARGET_FILE:tmo-harness> ${CMAKE_CURRENT_BINARY_DIR}/skip_rescue_short.log)
  set_tests_properties(harness/skip_rescue_short_of_kernel_timers PROPERTIES
                       TIMEOUT ${TMO_TEST_TIMEOUT})
endif()

# --benchmark_filter selects by the names the console and the JSON show
# (tests/harness/filter.sh; the full registered name has min_time/repeats
# between the case and its threads, which a filter cannot know).
if(TARGET tmo-harness)
  add_test(NAME harness/benchmark_filter
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/harness/filter.sh $<TARGET_FILE:tmo-harness>)
  set_tests_properties(harness/benchmark_filter PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
endif()
