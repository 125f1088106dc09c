# The tree's shape (scripts/shape): layers include only downward, no
# function over 80 lines outside tests/ and no file over 500 anywhere.  The same
# check must fail on a scratch tree with one violation of each kind.
add_test(NAME repo/shape COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/scripts/shape
                                 ${PROJECT_SOURCE_DIR})
add_test(NAME repo/shape_catches
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/shape_catches.sh ${PROJECT_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/shape_catches)
set_tests_properties(repo/shape repo/shape_catches PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
