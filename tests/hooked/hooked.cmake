# tests/hooked/<name>.c: a test that holds a thread at a point inside the
# lock-free core (src/lf/hook.h).  The hooks exist only where
# TMO_LF_TEST_HOOKS is defined, so the tests link the core compiled with
# them (tmo_lf_core_src, object library tmo_hooked_core, with the kit's
# checks, cases and waits) instead of libtmo, whose core has none.  ctest
# "hooked/<name>".
#
# Each is built again (in the release and TSan builds) with each defect it
# must catch planted (a macro of src/lf/: the order rule's two halves in
# timer.c, the timer thread's side of a base's lock, its hold of a busy
# base and its sort in fire.c, the calibration's wide pair and its steps
# in clock.c);
# ctest "hooked/<name>-planted-<plant>"
# passes only when the test reports every case that defect must fail, on
# every engine (the regexes below, one per test and plant).
set(tmo_hooked_kit ${PROJECT_SOURCE_DIR}/tests/kit/check.c ${PROJECT_SOURCE_DIR}/tests/kit/cases.c
                   ${PROJECT_SOURCE_DIR}/tests/kit/engine_test.c)
#   lf_order  now: TMO_LF_PLANT_ORDER_NOW, a round's bound read after its
#             steal and drain; transit: TMO_LF_PLANT_ORDER_TRANSIT, nodes
#             in transit not waited for; steal: TMO_LF_PLANT_STEAL_DATE, a
#             ring arm with no TSC stamp, dated by whoever files it (arm.c).
#   lf_lock   other: TMO_LF_PLANT_LOCK_OTHER, the timer thread takes a
#             base without looking at its owner's flag (under TSan the
#             race report is what catches it: the test reads the base the
#             planted lock lets the timer thread write).
set(tmo_hooked_plants_lf_order now=TMO_LF_PLANT_ORDER_NOW transit=TMO_LF_PLANT_ORDER_TRANSIT
                               steal=TMO_LF_PLANT_STEAL_DATE)
set(tmo_hooked_regex_lf_order_now "round/mpsc: Y ran before Z.*round/wheel: Y ran before Z")
set(tmo_hooked_regex_lf_order_steal "${tmo_hooked_regex_lf_order_now}")
set(tmo_hooked_regex_lf_order_transit
    "transit/mpsc: Y [^\n]*ran before X.*transit/wheel: Y [^\n]*ran before X")
#   lf_pair   wide: TMO_LF_PLANT_WIDE_PAIR, a calibration published from
#             a pair wider than a narrow one may be (clock.c); early:
#             TMO_LF_PLANT_OWN_PAIR_EARLY, an owner's pair taken as read
#             two floors before it was (clock.c, own_pair).
set(tmo_hooked_plants_lf_pair wide=TMO_LF_PLANT_WIDE_PAIR early=TMO_LF_PLANT_OWN_PAIR_EARLY)
set(tmo_hooked_regex_lf_pair_wide
    "lf_pair/mpsc: a calibration was published with a clock read error.*lf_pair/wheel: a calibration was published")
set(tmo_hooked_regex_lf_pair_early "lf_pair/own: arm [0-9]+ dated [0-9.]+ us early")
#   lf_busy   hold: TMO_LF_PLANT_BUSY_HOLD, a busy base held back only
#             from its `next` on (fire.c, busy_hold).
set(tmo_hooked_plants_lf_busy hold=TMO_LF_PLANT_BUSY_HOLD)
set(tmo_hooked_regex_lf_busy_hold "busy/wheel: B [^\n]*ran before A")
#   lf_tick   tick: TMO_LF_PLANT_TICK_ORDER, a due batch in the wheel's
#             tick order left unsorted (fire.c, near_sorted).
set(tmo_hooked_plants_lf_tick tick=TMO_LF_PLANT_TICK_ORDER)
set(tmo_hooked_regex_lf_tick_tick "lf_tick: B [0-9]+ ran before its A")
#   lf_step   none: TMO_LF_PLANT_STEP_NONE, no calibration finds a step
#             (clock.c, stepped): the rate is measured across it; epoch:
#             TMO_LF_PLANT_STEP_EPOCH, owners keep their copies of a pair
#             across a step (cal.h, lf_own_near); lo: TMO_LF_PLANT_STEP_LO,
#             a stamp made before a step converted across it (clock.c,
#             tsc_bounds).
set(tmo_hooked_plants_lf_step none=TMO_LF_PLANT_STEP_NONE epoch=TMO_LF_PLANT_STEP_EPOCH
                              lo=TMO_LF_PLANT_STEP_LO)
set(tmo_hooked_regex_lf_step_none "rate/wheel: [0-9]+ of [0-9]+ arms fired early")
set(tmo_hooked_regex_lf_step_epoch "copy: [0-9]+ of [0-9]+ arms fired early")
set(tmo_hooked_regex_lf_step_lo "before: 1 of 1 arms fired early")
#   lf_fork   mem: TMO_LF_PLANT_FORK_MEM, the fork's prepare handler
#             blind to the timer thread's mem_lock (rec.c, Fork).
set(tmo_hooked_plants_lf_fork mem=TMO_LF_PLANT_FORK_MEM)
set(tmo_hooked_regex_lf_fork_mem
    "trim/mpsc: the child's destroy left.*trim/wheel: the child's destroy left.*due/mpsc: the child's destroy left.*due/wheel: the child's destroy left")
#   lf_trim_hold  refuse: TMO_LF_PLANT_TRIM_REFUSE, growth past the soft
#             bound refused while a trim holds the depot (pool.c, may_grow);
#             small: TMO_LF_PLANT_TRIM_SMALL, a fixed allowance of 8 pages.
set(tmo_hooked_plants_lf_trim_hold refuse=TMO_LF_PLANT_TRIM_REFUSE
    small=TMO_LF_PLANT_TRIM_SMALL)
set(tmo_hooked_regex_lf_trim_hold_refuse
    "trim_hold/mpsc: the arm was refused.*trim_hold/wheel: the arm was refused")
set(tmo_hooked_regex_lf_trim_hold_small
    "trim_hold/mpsc: .* 512 accepted, then TMO_EAGAIN.*trim_hold/wheel: .* 512 accepted, then TMO_EAGAIN")
#   lf_trim_inbox  cand: TMO_LF_PLANT_TRIM_CAND, the allowance of a
#             trim that has given nothing back is its candidate pages
#             (trim.c, trim_pages), not one growth step.
set(tmo_hooked_plants_lf_trim_inbox cand=TMO_LF_PLANT_TRIM_CAND)
set(tmo_hooked_regex_lf_trim_inbox_cand
    "trim_inbox/mpsc: .* the pool grew by [0-9]+ pages, more than one growth step")
#   lf_refill  announced: TMO_LF_PLANT_REFILL_ANNOUNCED, an arm keeps
#             its announcement up through a refill of its cache (arm.c,
#             arm_general).
set(tmo_hooked_plants_lf_refill announced=TMO_LF_PLANT_REFILL_ANNOUNCED)
set(tmo_hooked_regex_lf_refill_announced
    "refill/mpsc: Y held back while an arm refilled.*refill/wheel: Y held back while an arm refilled")
#   lf_press  pressed: TMO_LF_PLANT_TRIM_PRESSED, the timer thread trims
#             while arms are refused growth (timer.c, announce_sleep).
set(tmo_hooked_plants_lf_press pressed=TMO_LF_PLANT_TRIM_PRESSED)
set(tmo_hooked_regex_lf_press_pressed
    "press/mpsc: the timer thread trimmed while arms were refused.*press/wheel: the timer thread trimmed while arms were refused")
#   lf_lead   early: TMO_LF_PLANT_LEAD_EARLY, what a round collected
#             ahead fired by the collect's horizon, not its time (timer.c,
#             fire_due).
set(tmo_hooked_plants_lf_lead early=TMO_LF_PLANT_LEAD_EARLY)
set(tmo_hooked_regex_lf_lead_early "lf_lead: [0-9]+ of [0-9]+ As ran early")
#   lf_woken  each: TMO_LF_PLANT_WAKE_EACH, a waker leaves SLEEPING set
#             (ec.c, tmo__lf_wake_for): every arm until the woken
#             thread runs wakes it again.
set(tmo_hooked_plants_lf_woken each=TMO_LF_PLANT_WAKE_EACH)
set(tmo_hooked_regex_lf_woken_each
    "woken/mpsc: [0-9]+ of 64 arms after A woke it again.*woken/wheel: [0-9]+ of 64 arms after A woke it again")
set(tmo_hooked_plants_lf_lock other=TMO_LF_PLANT_LOCK_OTHER)
set(tmo_hooked_regex_lf_lock_other
    "P was taken out of its base while its owner held|ThreadSanitizer: data race")

# The core and the kit with the hooks: compiled once, into the object
# library every hooked test links (each used to compile the whole core
# into itself: 25 copies of it in the release and TSan builds, most of the
# CPU of CI's background sanitizer builds).
function(tmo_hooked_flags target)
  target_compile_definitions(${target} PRIVATE TMO_LF_TEST_HOOKS ${ARGN})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/kit
                                               ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/src/lf
                                               ${PROJECT_SOURCE_DIR}/include)
  if(TMO_TSAN)
    target_include_directories(${target} BEFORE PRIVATE ${TMO_CK_OVERRIDE_DIR})
  endif()
endfunction()
add_library(tmo_hooked_kit OBJECT ${tmo_hooked_kit})
add_library(tmo_hooked_core OBJECT ${tmo_lf_core_src})
foreach(t tmo_hooked_kit tmo_hooked_core)
  tmo_hooked_flags(${t})
  target_link_libraries(${t} PRIVATE PkgConfig::CK)
endforeach()

# tmo_hooked_planted_sources(OUT DEF): the core's sources a planted build
# compiles again with DEF: those that name it, or the whole core when a
# header of src/ or impls/ names it (what includes that header is not
# traced).  A macro no file names is an error here, not a planted test
# that cannot catch anything.  Editing a core file configures again, so
# that a plant moved to another file moves its sources too.
file(GLOB tmo_hooked_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*/*.h
                                               ${PROJECT_SOURCE_DIR}/impls/*.h)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${tmo_hooked_headers}
                                                               ${tmo_lf_core_src})
function(tmo_hooked_planted_sources out def)
  tmo_files_naming(in_headers "${def}" ${tmo_hooked_headers})
  if(in_headers)
    set(${out} ${tmo_lf_core_src} PARENT_SCOPE)
    return()
  endif()
  tmo_files_naming(named "${def}" ${tmo_lf_core_src})
  if(NOT named)
    message(FATAL_ERROR "tests/hooked/hooked.cmake: no source of the core names ${def}")
  endif()
  set(${out} ${named} PARENT_SCOPE)
endfunction()

# tmo_hooked_test(EXE SRC [DEF]): SRC with the hooked core; with DEF, the
# core's files that name it compiled again with it, in place of theirs.
function(tmo_hooked_test exe src defs)
  set(core $<TARGET_OBJECTS:tmo_hooked_core>)
  set(planted "")
  if(defs)
    tmo_hooked_planted_sources(planted ${defs})
    if("${planted}" STREQUAL "${tmo_lf_core_src}")
      set(core "")
    else()
      tmo_objects_except(core tmo_hooked_core ${planted})
    endif()
  endif()
  add_executable(${exe} ${src} ${planted} $<TARGET_OBJECTS:tmo_hooked_kit> ${core})
  tmo_hooked_flags(${exe} ${defs})
  target_link_libraries(${exe} PRIVATE Threads::Threads PkgConfig::CK rt ${CMAKE_DL_LIBS})
endfunction()

file(GLOB hooked_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.c)
foreach(src IN LISTS hooked_tests)
  get_filename_component(name ${src} NAME_WE)
  tmo_hooked_test(test_hooked_${name} ${src} "")
  add_test(NAME hooked/${name} COMMAND test_hooked_${name})
  # a test that cannot run here says SKIPPED: and why (lf_pair: no pairs
  # where arms stamp with the clock)
  set_tests_properties(hooked/${name} PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT}
                       SKIP_REGULAR_EXPRESSION "SKIPPED:")
  # The planted builds in release and under TSan only: whether a test
  # catches its defect does not hang on ASan's instrumentation.  (Each
  # compiled the whole core again when this was decided: CI's scenario
  # step, beside which the ASan build runs, took 495-562 s with ten of
  # them and 577-602 s once lf_step's three came.)
  if(TMO_SANITIZED AND NOT TMO_TSAN)
    continue()
  endif()
  foreach(p IN LISTS tmo_hooked_plants_${name})
    string(REPLACE "=" ";" p "${p}")
    list(GET p 0 plant)
    list(GET p 1 def)
    tmo_hooked_test(test_hooked_${name}_planted_${plant} ${src} ${def})
    add_test(NAME hooked/${name}-planted-${plant} COMMAND test_hooked_${name}_planted_${plant})
    set_tests_properties(hooked/${name}-planted-${plant} PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT}
                         PASS_REGULAR_EXPRESSION "${tmo_hooked_regex_${name}_${plant}}"
                         SKIP_REGULAR_EXPRESSION "SKIPPED:")
  endforeach()
endforeach()
