# The per-engine tests can fail: each is built once more with broken fixture
# engines (tests/fixtures/broken_engines.c: wrappers around condvar with one
# bug each, never in the registry; tests/fixtures/wrap.c keeps the rest of
# the engine contract) and run against them.  A broken engine
# must make the test exit 1 (its checks failed: not a crash, not a pass);
# the honest wrapper must pass, so the failures are the bugs'.
set(tmo_fx_src ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/broken_engines.c
               ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/wrap.c)
foreach(t contract contract_cancel contract_lifetime badinput faults caps destroy)
  add_executable(test_engine_${t}_fixtures ${CMAKE_CURRENT_SOURCE_DIR}/engine/${t}.c ${tmo_fx_src})
  target_link_libraries(test_engine_${t}_fixtures PRIVATE tmo_testkit)
  target_include_directories(test_engine_${t}_fixtures PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/fixtures)
endforeach()

# name | test | fixture engine | case filter or size | expected exit status
#      | what the output must show (grep -E), when the failure must be a case's
# A row with the last field passes only when the test exits with that status
# and its output says the case failed ("FAIL <case>", cases.h): a broken
# engine that trips some other case, or crashes, does not count.
set(tmo_fx_rows
    "contract_honest|contract|fx-honest||0|"
    "contract_early|contract|fx-early|never_early|1|^FAIL test_never_early$"
    "contract_liar|contract|fx-liar|exactly_once|1|^FAIL test_exactly_once"
    "contract_lossy|contract|fx-lossy|exactly_once|1|^FAIL test_exactly_once"
    "contract_cancel_honest|contract_cancel|fx-honest||0|"
    "contract_cancel_fibber|contract_cancel|fx-fibber|cancel_before_deadline|1|^FAIL test_cancel_before_deadline$"
    "contract_cancel_liar|contract_cancel|fx-liar|cancel_after_fire|1|^FAIL test_cancel_after_fire$"
    "contract_cancel_nowait|contract_cancel|fx-nowait|waits_for_running|1|^FAIL test_cancel_waits_for_running$"
    "contract_lifetime_honest|contract_lifetime|fx-honest||0|"
    "contract_lifetime_lazy|contract_lifetime|fx-lazy|free_after_cancel|1|^FAIL test_free_after_cancel$|AddressSanitizer: use-after-poison"
    "contract_lifetime_toucher|contract_lifetime|fx-toucher|callback_frees_timer|1|^FAIL test_callback_frees_timer$|AddressSanitizer: use-after-poison"
    "contract_lifetime_hasty|contract_lifetime|fx-hasty|destroy_pending|1|^FAIL test_destroy_pending$"
    "badinput_honest|badinput|fx-honest||0|"
    "badinput_lax|badinput|fx-lax||1|"
    "faults_honest|faults|fx-honest||0|"
    "faults_faultlossy|faults|fx-faultlossy||1|"
    "caps_honest|caps|fx-honest||0|"
    "caps_allocating|caps|fx-allocating||1|"
    "caps_syscalling|caps|fx-syscalling||1|"
    "destroy_honest|destroy|fx-honest|20000|0|"
    "destroy_leaky|destroy|fx-leaky|20000|1|")
# Under TSan caps counts no system calls and says so (tests/engine/caps.c):
# there the syscalling fixture cannot be caught, and must get that line.
if(TMO_TSAN)
  list(REMOVE_ITEM tmo_fx_rows "caps_syscalling|caps|fx-syscalling||1|")
  add_test(NAME checks_can_fail/caps_syscalling_tsan
           COMMAND sh -c "\"$0\" fx-syscalling 2>&1 | grep -q 'TSan build: system calls not counted'"
                   $<TARGET_FILE:test_engine_caps_fixtures>)
  set_tests_properties(checks_can_fail/caps_syscalling_tsan PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
endif()
foreach(row IN LISTS tmo_fx_rows)
  string(FIND "${row}" "|" at)
  string(SUBSTRING "${row}" 0 ${at} name)
  string(REPLACE "|" ";" f "${row}")
  list(GET f 1 t)
  list(GET f 2 engine)
  list(GET f 3 arg)
  list(GET f 4 status)
  # the rest of the row after the fifth '|' (the pattern may hold '|')
  string(REGEX REPLACE "^[^|]*\\|[^|]*\\|[^|]*\\|[^|]*\\|[^|]*\\|" "" expect "${row}")
  if(expect STREQUAL "")
    add_test(NAME checks_can_fail/${name}
             COMMAND sh -c "\"$0\" \"$1\" $2 >/dev/null 2>&1; test $? -eq ${status}"
                     $<TARGET_FILE:test_engine_${t}_fixtures> ${engine} "${arg}")
  else()
    add_test(NAME checks_can_fail/${name}
             COMMAND sh -c "out=$(\"$0\" \"$1\" $2 2>&1); rc=$?; printf '%s\\n' \"$out\"; test $rc -eq ${status} && printf '%s\\n' \"$out\" | grep -Eq \"$3\""
                     $<TARGET_FILE:test_engine_${t}_fixtures> ${engine} "${arg}" "${expect}")
  endif()
  set_tests_properties(checks_can_fail/${name} PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
endforeach()
