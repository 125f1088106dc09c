# unit/wheel-planted-ways: unit/wheel built with a delete that marks a slot
# empty once the node's own way is, whatever its other ways hold
# (TMO_WHEEL_PLANT_ONE_WAY, src/ds/wheel.h; the model's nodes fill every
# way).  It passes only when the model reports what that loses: timers
# handed out late, or a next_expiry past the next due time.
tmo_test_executable(test_unit_wheel_planted_ways ${CMAKE_CURRENT_LIST_DIR}/wheel.c)
target_compile_definitions(test_unit_wheel_planted_ways PRIVATE TMO_WHEEL_PLANT_ONE_WAY)
add_test(NAME unit/wheel-planted-ways COMMAND test_unit_wheel_planted_ways)
set_tests_properties(unit/wheel-planted-ways PROPERTIES
                     TIMEOUT ${TMO_TEST_TIMEOUT}
                     PASS_REGULAR_EXPRESSION "wheel model violation: (late|next_expiry)")
