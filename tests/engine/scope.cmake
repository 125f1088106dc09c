# tests/engine/scope_delivery.c runs the Bug #8730 block and truth table and
# the edge-of-deadline block of the scenario kit (scenarios/kit/
# ruby_timeout.h), the ones the skip-rescue scenario runs, and
# tests/engine/scope_nesting.c its nested-scopes blocks.
foreach(t scope_delivery scope_nesting)
  target_include_directories(test_engine_${t} PRIVATE ${PROJECT_SOURCE_DIR}/scenarios)
endforeach()
