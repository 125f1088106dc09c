# tests/engine/scope.c runs the Bug #8730 block and truth table of the
# scenario kit (scenarios/kit/bug8730.h), the one the skip-rescue scenario runs.
target_include_directories(test_engine_scope PRIVATE ${PROJECT_SOURCE_DIR}/scenarios)
