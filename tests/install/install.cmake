# install/pkg-config: `cmake --install` to a scratch prefix, then a consumer
# built only through the installed tmo.pc must run (same compiler and flags
# as this build, so sanitizer builds link their runtime).
add_test(NAME install/pkg-config
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/check.sh ${PROJECT_BINARY_DIR}
                 ${CMAKE_C_COMPILER} "${CMAKE_C_FLAGS}"
                 ${CMAKE_CURRENT_LIST_DIR}/consumer.c)
set_tests_properties(install/pkg-config PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})

# install/find_package: the same scratch install, then a CMake project that
# finds tmo only through find_package(tmo) (tmo::tmo and the static
# library's private libraries, cmake/tmoConfig.cmake.in) must build and run
# an arm and a cancel on the wheel engine; a copy of the prefix whose
# targets file lost the link interface must fail to link.
add_test(NAME install/find_package
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/find_package.sh ${PROJECT_BINARY_DIR}
                 ${CMAKE_CURRENT_LIST_DIR}/find_package ${CMAKE_GENERATOR} ${CMAKE_C_COMPILER}
                 "${CMAKE_C_FLAGS}" "${CMAKE_EXE_LINKER_FLAGS}" "${CMAKE_TOOLCHAIN_FILE}"
                 ${CMAKE_CROSSCOMPILING_EMULATOR})
# Two CMake configures and builds: twice the usual timeout.
math(EXPR tmo_find_package_timeout "2 * ${TMO_TEST_TIMEOUT}")
set_tests_properties(install/find_package PROPERTIES TIMEOUT ${tmo_find_package_timeout})
