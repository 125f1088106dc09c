# install/pkg-config: `cmake --install` to a scratch prefix, then a consumer
# built only through the installed tmo.pc must run (same compiler and flags
# as this build, so sanitizer builds link their runtime).
add_test(NAME install/pkg-config
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/check.sh ${PROJECT_BINARY_DIR}
                 ${CMAKE_C_COMPILER} "${CMAKE_C_FLAGS}"
                 ${CMAKE_CURRENT_LIST_DIR}/consumer.c)
set_tests_properties(install/pkg-config PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
