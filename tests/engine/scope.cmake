# tests/engine/scope.c runs the Bug #8730 block and truth table and the
# edge-of-deadline block of the scenario kit (scenarios/kit/ruby_timeout.h),
# the ones the skip-rescue scenario runs.
target_include_directories(test_engine_scope PRIVATE ${PROJECT_SOURCE_DIR}/scenarios)
