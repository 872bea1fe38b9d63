# docs/expert-parallel.md's pkg-config line for libqmoe_mpi, from an install into a scratch prefix:
#   mpicc consumer_mpi.c $(pkg-config --cflags --libs qmoe-mpi) -o consumer
# builds and runs; then the prefix is moved and it is done again (the .pc files find their prefix
# from their own location). Arguments: BUILD_DIR PREFIX SOURCE MPICC.
cmake_policy(SET CMP0057 NEW) # if(IN_LIST) in a -P script
include(${CMAKE_CURRENT_LIST_DIR}/../install/prefix.cmake)
qmoe_install_into(${BUILD_DIR} ${PREFIX})

function(build_and_run prefix)
  qmoe_pkg_flags(${prefix} qmoe-mpi flags)
  if(NOT "-lqmoe_mpi" IN_LIST flags OR NOT "-lqmoe" IN_LIST flags)
    message(FATAL_ERROR "qmoe-mpi.pc must give -lqmoe_mpi and (through qmoe) -lqmoe: ${flags}")
  endif()
  execute_process(COMMAND ${MPICC} ${SOURCE} ${flags} -o ${prefix}/consumer_mpi RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "building with the pkg-config flags failed")
  endif()
  execute_process(COMMAND ${prefix}/consumer_mpi RESULT_VARIABLE rc OUTPUT_VARIABLE out)
  if(rc OR NOT out MATCHES "libqmoe_mpi linked")
    message(FATAL_ERROR "the consumer built from ${prefix} did not run: rc ${rc}, \"${out}\"")
  endif()
endfunction()

build_and_run(${PREFIX})
file(RENAME ${PREFIX} ${PREFIX}-moved)
build_and_run(${PREFIX}-moved)
