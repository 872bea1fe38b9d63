# The README's pkg-config line for libqmoe_mpi, from an install into a scratch prefix:
#   mpicc consumer_mpi.c $(pkg-config --cflags --libs qmoe-mpi) -o consumer
# builds and runs; then the prefix is moved and it is done again (the .pc files find their prefix
# from their own location). Arguments: BUILD_DIR PREFIX SOURCE MPICC.
file(REMOVE_RECURSE ${PREFIX} ${PREFIX}-moved)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
  RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()

function(build_and_run prefix)
  file(GLOB_RECURSE pc ${prefix}/*/qmoe-mpi.pc)
  if(NOT pc)
    message(FATAL_ERROR "qmoe-mpi.pc was not installed under ${prefix}")
  endif()
  get_filename_component(pcdir ${pc} DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} ${pcdir})
  execute_process(COMMAND pkg-config --cflags --libs qmoe-mpi
    OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(rc OR NOT flags MATCHES "-I${prefix}/" OR NOT flags MATCHES "-lqmoe_mpi" OR NOT flags MATCHES "-lqmoe( |$)")
    message(FATAL_ERROR "pkg-config --cflags --libs qmoe-mpi: \"${flags}\" (rc ${rc}): not into ${prefix}")
  endif()
  message(STATUS "pkg-config --cflags --libs qmoe-mpi: ${flags}")
  separate_arguments(flags UNIX_COMMAND "${flags}")
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
