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

# unit/wheel-planted-near: unit/wheel with src/ds/wheel.c built to trust
# tmo__wheel_add_near's near time (TMO_WHEEL_PLANT_NEAR_TRUSTED: the node
# stays where near put it, whatever its deadline).  It passes only when
# the model reports it: timers handed out before their tick, or late.
tmo_test_executable(test_unit_wheel_planted_near ${CMAKE_CURRENT_LIST_DIR}/wheel.c)
target_sources(test_unit_wheel_planted_near PRIVATE ${PROJECT_SOURCE_DIR}/src/ds/wheel.c)
target_compile_definitions(test_unit_wheel_planted_near PRIVATE TMO_WHEEL_PLANT_NEAR_TRUSTED)
add_test(NAME unit/wheel-planted-near COMMAND test_unit_wheel_planted_near)
set_tests_properties(unit/wheel-planted-near PROPERTIES
                     TIMEOUT ${TMO_TEST_TIMEOUT}
                     PASS_REGULAR_EXPRESSION "wheel model violation: (late|next_expiry|node [0-9]+ fired before its tick)")
