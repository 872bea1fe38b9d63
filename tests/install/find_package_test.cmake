# Installs BUILD_DIR into PREFIX, configures, builds and runs the consumer project (which needs
# find_package(qmoe 0.3 CONFIG) and refuses 0.2, 0.4 and 1.0), then moves the prefix elsewhere and
# does it all again from a fresh build folder: the installed package files hold no absolute path.
include(${CMAKE_CURRENT_LIST_DIR}/prefix.cmake)
qmoe_install_into(${BUILD_DIR} ${PREFIX} ${PREFIX}-build ${PREFIX}-moved-build)

function(build_and_run prefix)
  set(bin ${prefix}-build)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER} -B ${bin} -G ${GENERATOR}
      -DCMAKE_C_COMPILER=${CC} -DCMAKE_PREFIX_PATH=${prefix}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "configuring the consumer against ${prefix} failed:\n${out}\n${err}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${bin}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "building the consumer against ${prefix} failed:\n${out}\n${err}")
  endif()
  set(exes consumer_native consumer_acl)
  if(EXISTS ${BUILD_DIR}/src/mpi) # libqmoe_mpi was built: the package must give qmoe::qmoe_mpi
    list(APPEND exes consumer_mpi)
  endif()
  foreach(exe ${exes})
    execute_process(COMMAND ${bin}/${exe} RESULT_VARIABLE rc OUTPUT_VARIABLE out
      ERROR_VARIABLE err)
    if(rc)
      message(FATAL_ERROR "${exe} (against ${prefix}) failed: ${rc}\n${out}\n${err}")
    endif()
    message(STATUS "${exe}: ${out}")
  endforeach()
endfunction()

build_and_run(${PREFIX})
file(RENAME ${PREFIX} ${PREFIX}-moved)
build_and_run(${PREFIX}-moved)
