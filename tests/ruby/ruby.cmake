# The Ruby binding (bindings/ruby): tests/ruby/test_timeout.rb under Debian's
# ruby and ruby-test-unit, one ctest per engine (peers included),
# "ruby/<engine>", loading the
# extension this build made (target tmo-ruby) through plain
# `require "timeout"`; an engine that cannot be created here exits 77
# (skipped, with the reason).  ruby/planted-late runs the deadline race with
# a planted defect (the caller never withdraws a fired handoff): it passes
# only if the race catches the late interrupts.  Where the binding is not
# built (no ruby-dev, a sanitizer build) one skipped ctest says why.  The
# per-engine timeout is 300 s: the thread engine starts a thread per block,
# 100,000 in the race (42 s on the loaded 2-core VM).
if(TMO_RUBY_OK)
  set(ruby_run ${TMO_RUBY} -I ${PROJECT_BINARY_DIR}/bindings/ruby
               -I ${PROJECT_SOURCE_DIR}/bindings/ruby/lib ${CMAKE_CURRENT_LIST_DIR}/test_timeout.rb)
  # Every engine runs every case.  The binding is the same C over any
  # engine, and the peers share one adapter core (TMO_PEER_ENGINES), so
  # their deadline race is 10,000 blocks (TMO_TEST_SCALE=0.1, about 3 s
  # each) where the six engines of the tree's own designs race 100,000.
  foreach(engine IN LISTS TMO_ENGINES)
    set(env "TMO_ENGINE=${engine}")
    if(engine IN_LIST TMO_PEER_ENGINES)
      list(APPEND env "TMO_TEST_SCALE=0.1")
    endif()
    add_test(NAME ruby/${engine} COMMAND ${ruby_run})
    set_tests_properties(ruby/${engine} PROPERTIES ENVIRONMENT "${env}"
                         SKIP_RETURN_CODE 77 TIMEOUT 300)
  endforeach()
  # ruby/refused: every third arm's first try answered TMO_EAGAIN by the
  # binding (TMO_RUBY_REFUSE, a test hook), as a wheel whose timer thread is
  # starved answers: every case must pass, the refusals asked again.
  add_test(NAME ruby/refused COMMAND ${ruby_run})
  set_tests_properties(ruby/refused PROPERTIES
                       ENVIRONMENT "TMO_ENGINE=wheel;TMO_RUBY_REFUSE=3;TMO_TEST_SCALE=0.1"
                       PASS_REGULAR_EXPRESSION "asked again [1-9][0-9]*\n.*36 tests, [0-9]+ assertions, 0 failures, 0 errors"
                       TIMEOUT ${TMO_TEST_TIMEOUT})
  add_test(NAME ruby/planted-late
           COMMAND ${ruby_run} -n test_no_interrupt_after_the_block_returned)
  set_tests_properties(ruby/planted-late PROPERTIES
                       ENVIRONMENT "TMO_RUBY_PLANT=late;TMO_TEST_SCALE=0.1"
                       PASS_REGULAR_EXPRESSION "race on wheel: .* [1-9][0-9]* late;.*1 tests, 1 assertions, 0 failures, 0 errors"
                       TIMEOUT ${TMO_TEST_TIMEOUT})
else()
  add_test(NAME ruby/binding COMMAND sh -c "echo \"SKIP: the Ruby binding is not built: $0\"; exit 77"
                                   "${TMO_RUBY_WHY}")
  set_tests_properties(ruby/binding PROPERTIES SKIP_RETURN_CODE 77)
endif()
