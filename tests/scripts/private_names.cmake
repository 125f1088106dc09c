# Private names stay private: every global symbol libtmo.a defines is
# declared by an installed header (TMO_PUBLIC_HEADERS) or is tmo__-prefixed
# (scripts/private-names).  The same check must name a leak planted in a
# copy of the library, and only the leak (private_names_catches.sh).
add_test(NAME repo/private_names
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/scripts/private-names --nm ${CMAKE_NM}
                 $<TARGET_FILE:tmo> ${TMO_PUBLIC_HEADERS})
add_test(NAME repo/private_names_catches
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/private_names_catches.sh ${PROJECT_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/private_names_catches ${CMAKE_C_COMPILER}
                 ${CMAKE_AR} ${CMAKE_NM} $<TARGET_FILE:tmo> ${TMO_PUBLIC_HEADERS})
set_tests_properties(repo/private_names repo/private_names_catches
                     PROPERTIES TIMEOUT ${TMO_TEST_TIMEOUT})
