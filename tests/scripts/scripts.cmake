# The scripts: packages (scripts/deps, scripts/ensure-deps), comparing runs
# (scripts/compare), plots and REPORT.md (scripts/plot), thread scaling
# (scripts/scale: scale_quick through this build's harness, the others
# through tests/fixtures/scale_fake_harness.py), and the hosted-CI workflow
# (.github/workflows/ci.yml).  tests/scripts/test.sh, one ctest per case;
# tests/scripts/check_workflow.py for the workflow.
#
# In the release build only: their subject is the scripts, which read the
# harness's output the same from every build, and the sanitizer builds'
# harness runs its scenarios in those steps' own rows (tests/harness/
# runs.txt).  Registered in TSan and ASan too they took 90 and 62 s of
# those steps' test time (CI run 39, the 2-vCPU AMD box), which CI's 30
# minutes there could no longer spare.
if(TMO_SANITIZED)
  return()
endif()
foreach(case deps_nonroot deps_root deps_installed deps_one_list compare compare_reference
        compare_controls compare_drift compare_processes compare_machines plot_report scale_quick scale_plan scale_catches)
  add_test(NAME scripts/${case}
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/scripts/test.sh ${PROJECT_SOURCE_DIR} ${case}
                   $<TARGET_FILE:tmo-harness>)
  set_tests_properties(scripts/${case} PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
endforeach()

# The workflow parses and every script it names exists; the same check must
# fail on a copy whose suite step names a script that is not there.
set(wf ${PROJECT_SOURCE_DIR}/.github/workflows/ci.yml)
add_test(NAME scripts/ci_workflow
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/scripts/check_workflow.py ${PROJECT_SOURCE_DIR} ${wf})
add_test(NAME scripts/ci_workflow_catches_missing
         COMMAND sh -c "sed 's#bash .ci/run#bash .ci/no-such-run#' \"$1\" > \"$3\" &&
                        ! cmp -s \"$1\" \"$3\" &&
                        ! /usr/bin/python3 \"$0/tests/scripts/check_workflow.py\" \"$0\" \"$3\" > \"$3.out\" &&
                        grep -q 'runs .ci/no-such-run, which is not in the repository' \"$3.out\""
                 ${PROJECT_SOURCE_DIR} ${wf} unused ${CMAKE_CURRENT_BINARY_DIR}/ci_missing_step.yml)

# scripts/instructions weighs callgrind's counts by what objdump says each
# instruction is: the classifier's table, and a small run (condvar's seed
# pair, 2,000 pairs) whose mutex must show as locked instructions and whose
# arm as one clock read a pair (0 would mean the weighing is broken; 2.00,
# what it read while a call site's Ir, which holds the PLT stub too, was
# taken for its calls); its heap alone
# (structure:heap) must show none locked, and condvar's x structure must
# be there, above 1 (the engine's mutex and wake-up over a push+remove).
add_test(NAME scripts/instructions_classify
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/scripts/lib/instructions.py --self-test)
add_test(NAME scripts/instructions_counts
         COMMAND sh -c "d=$(mktemp -d) && TMO_INSTR_PAIRS=2000 TMO_INSTR_CASES=seed \"$0/scripts/instructions\" \"$d\" condvar && /usr/bin/python3 -c 'import json,sys; c=[r for r in json.load(open(sys.argv[1]))[\"counts\"] if r[\"engine\"]==\"condvar\" and r[\"thread\"]==\"arming\"][0]; print(c); j=json.load(open(sys.argv[1])); h=[r for r in j[\"counts\"] if r[\"engine\"]==\"structure:heap\"][0]; x=j[\"x_structure\"][\"condvar\"][\"seed\"]; print(h, x); sys.exit(0 if c[\"instructions\"]>50 and c[\"locked\"]>=2 and 0.95<=c[\"clock_reads\"]<=1.05 and h[\"instructions\"]>20 and h[\"locked\"]<0.01 and x>1 else 1)' \"$d/instructions.json\"; rc=$?; rm -rf \"$d\"; exit $rc"
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(scripts/instructions_counts PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
# The wheel's held pair costs one locked instruction on the arming thread
# (tests/scripts/instructions_held_locked.py says how it is judged).
add_test(NAME scripts/instructions_held_locked
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/scripts/instructions_held_locked.py
                 ${PROJECT_SOURCE_DIR})
# Alone: beside the parallel suite the timer thread's calibration went stale
# under valgrind in every run of fresh-root CI run 33 (0.13-0.75 clock reads,
# before the owner's own pair, clock.c).  No run judged: skipped, with the
# figures.
set_tests_properties(scripts/instructions_held_locked PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT}
                     RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
