# Runs test_mpi_rank_dies under mpirun with a time limit: passes when the job ends on its own
# with a non-zero exit (a rank died), fails when it exits 0 or hangs until the limit.
execute_process(COMMAND ${MPIEXEC} ${FLAGS} -np 3 ${PROGRAM} ${HOW}
  RESULT_VARIABLE rc TIMEOUT ${LIMIT} OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "mpirun: ${rc}\n${out}${err}")
if(rc MATCHES "timeout|Process terminated due to timeout")
  message(FATAL_ERROR "the job hung: still running after ${LIMIT} s")
endif()
if(rc STREQUAL "0")
  message(FATAL_ERROR "the job exited 0 although a rank died")
endif()
