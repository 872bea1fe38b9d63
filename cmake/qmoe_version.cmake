# The one version source is project(qmoe VERSION x.y.z) in the top-level CMakeLists.txt. This
# turns it into the generated header qmoe/version.h (installed with the other headers), and gives
# projects that build the sources on their own (fuzz/) the same header from the same line.
# Sets QMOE_GENERATED_INCLUDE_DIR (the folder holding qmoe/version.h).
if(PROJECT_NAME STREQUAL "qmoe")
  set(QMOE_VERSION_STRING ${PROJECT_VERSION})
else()
  file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/../CMakeLists.txt _qmoe_project
    REGEX "^project\\(qmoe VERSION [0-9]+\\.[0-9]+\\.[0-9]+")
  string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" QMOE_VERSION_STRING "${_qmoe_project}")
endif()
if(NOT QMOE_VERSION_STRING MATCHES "^([0-9]+)\\.([0-9]+)\\.([0-9]+)$")
  message(FATAL_ERROR "qmoe: no version in project(qmoe VERSION x.y.z)")
endif()
set(QMOE_VERSION_MAJOR ${CMAKE_MATCH_1})
set(QMOE_VERSION_MINOR ${CMAKE_MATCH_2})
set(QMOE_VERSION_PATCH ${CMAKE_MATCH_3})
set(QMOE_GENERATED_INCLUDE_DIR ${CMAKE_BINARY_DIR}/generated/include)
configure_file(${CMAKE_CURRENT_LIST_DIR}/version.h.in
  ${QMOE_GENERATED_INCLUDE_DIR}/qmoe/version.h @ONLY)
