# Installs the build into a scratch prefix, builds the seed sample with the documented line
#   c++ sample_weight_nz.cpp $(pkg-config --cflags --libs qmoe-acl) -o sample
# and runs it through the output checker; then moves the prefix elsewhere and does it again (the
# .pc files find their prefix from their own location). Also checks that the vendor-compatible
# headers come from qmoe's own folder, never a bare include/acl that would shadow a vendor SDK.
# Arguments: BUILD_DIR PREFIX SAMPLE CHECKER CXX.
include(${CMAKE_CURRENT_LIST_DIR}/../install/prefix.cmake)
qmoe_install_into(${BUILD_DIR} ${PREFIX})
if(EXISTS ${PREFIX}/include/acl OR NOT EXISTS ${PREFIX}/include/qmoe/compat/acl/acl.h)
  message(FATAL_ERROR "the acl headers must be installed under include/qmoe/compat only")
endif()

function(build_sample prefix)
  qmoe_pkg_flags(${prefix} qmoe flags)
  qmoe_pkg_flags(${prefix} qmoe-acl flags)
  execute_process(COMMAND ${CXX} ${SAMPLE} ${flags} -o ${prefix}/sample RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "building the sample with the pkg-config flags failed")
  endif()
  execute_process(COMMAND ${CHECKER} ${prefix}/sample 16777216 8192 RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "the installed sample did not run as expected (prefix ${prefix})")
  endif()
endfunction()

build_sample(${PREFIX})
file(RENAME ${PREFIX} ${PREFIX}-moved)
build_sample(${PREFIX}-moved)
