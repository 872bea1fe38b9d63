# Installs the build into a scratch prefix, builds the seed sample with the documented line
#   c++ sample_weight_nz.cpp $(pkg-config --cflags --libs qmoe-acl) -o sample
# and runs it through the output checker; then moves the prefix elsewhere and does it again (the
# .pc files find their prefix from their own location). Also checks that the vendor-compatible
# headers come from qmoe's own folder, never a bare include/acl that would shadow a vendor SDK.
# Arguments: BUILD_DIR PREFIX SAMPLE CHECKER CXX.
file(REMOVE_RECURSE ${PREFIX} ${PREFIX}-moved)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
  RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
if(EXISTS ${PREFIX}/include/acl OR NOT EXISTS ${PREFIX}/include/qmoe/compat/acl/acl.h)
  message(FATAL_ERROR "the acl headers must be installed under include/qmoe/compat only")
endif()

function(build_sample prefix)
  file(GLOB_RECURSE pc ${prefix}/*/qmoe-acl.pc)
  if(NOT pc)
    message(FATAL_ERROR "qmoe-acl.pc was not installed under ${prefix}")
  endif()
  get_filename_component(pcdir ${pc} DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} ${pcdir})
  foreach(pkg qmoe qmoe-acl)
    execute_process(COMMAND pkg-config --cflags --libs ${pkg}
      OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
    if(rc)
      message(FATAL_ERROR "pkg-config ${pkg} failed")
    endif()
    message(STATUS "pkg-config --cflags --libs ${pkg}: ${flags}")
    if(NOT flags MATCHES "-I${prefix}/")
      message(FATAL_ERROR "${pkg}.pc does not point into ${prefix}")
    endif()
  endforeach()
  separate_arguments(flags UNIX_COMMAND "${flags}")
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
