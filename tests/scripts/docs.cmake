# The documents (README.md, docs/) as reference and results/ as records:
# scripts/docs-check (figures generated or linked to a record, no commit
# hashes, no before/after stories, the records' names, sections and
# immutability), and the README's figures block, which scripts/docs-figures
# writes from results/baseline.  Each check is shown able to fail on a
# planted copy (tests/scripts/docs_catches.sh; the figures block with one
# figure edited by hand).  The manual in docs/harness.md is checked by
# harness/help_matches_manual (tests/harness/harness.cmake).
add_test(NAME docs/check
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/scripts/docs-check --git ${PROJECT_SOURCE_DIR})
foreach(case figure figure_code hash story block length record_name record_section baseline record_edit)
  add_test(NAME docs/check_catches_${case}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/docs_catches.sh ${PROJECT_SOURCE_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/docs_catches/${case} ${case})
endforeach()
add_test(NAME docs/figures_current
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/scripts/docs-figures --check)
# A figure of the block edited by hand (wheel's seed ns, the first figure
# of its table row) must make the check fail with a diff.
add_test(NAME docs/figures_catches_hand_edit
         COMMAND sh -c "sed -E '/^[|] wheel [|]/s/[|] [0-9][0-9.,]* [|]/| 1.00 |/' \"$0/README.md\" > \"$1\" &&
                        ! cmp -s \"$0/README.md\" \"$1\" &&
                        /usr/bin/python3 \"$0/scripts/docs-figures\" --check --readme=\"$1\" > \"$1.out\" 2>&1;
                        rc=$?; cat \"$1.out\"; test $rc -eq 1 && grep -q '^+| wheel |' \"$1.out\""
                 ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/figures_hand_edit.md)
get_property(docs_tests DIRECTORY PROPERTY TESTS)
list(FILTER docs_tests INCLUDE REGEX "^docs/")
set_tests_properties(${docs_tests} PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
