# `mpirun -np NP qmoe moe run --ep NP` writes the same bytes as `qmoe moe run` (tests/mpi).
# -DQMOE=<qmoe> -DMPIEXEC=<mpirun> "-DFLAGS=<its flags>" -DNP=<ranks> -DWORK=<a scratch folder>
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
    TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what}: exit ${rc}\n${out}\n${err}")
  endif()
endfunction()

# Three layers: a8w8 with a shared expert (float32 weights); a8w4 in groups of 64, bfloat16
# weights, top-4 of 16; DeepSeek-style (sigmoid gating in groups, a correction bias, a shared
# expert) at small sizes.
set(layers "--E,8,--top-k,2,--shared-I,256" "--E,16,--top-k,4,--mode,a8w4,--group-size,64,--dtype,bf16"
  "--model,deepseek-v3,--E,16,--shared-I,128")
set(n 0)
foreach(shape IN LISTS layers)
  math(EXPR n "${n} + 1")
  set(d ${WORK}/layer${n})
  string(REPLACE "," ";" shape "${shape}")
  run("gen ${n}" ${QMOE} moe gen --out ${d} --H 256 --I 128 --tokens 41 --seed ${n} ${shape})
  set(in --layer ${d}/layer.safetensors --hidden ${d}/hidden.npy --router-logits ${d}/router_logits.npy
    --threads 1)
  run("one process ${n}" ${QMOE} moe run ${in} --out ${d}/one.npy)
  run("--ep ${NP}, layer ${n}" ${MPIEXEC} ${FLAGS} -np ${NP} ${QMOE} moe run --ep ${NP} ${in}
    --out ${d}/ep.npy)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${d}/one.npy ${d}/ep.npy
    RESULT_VARIABLE same)
  if(NOT same EQUAL 0)
    message(FATAL_ERROR "layer ${n}: --ep ${NP} wrote other bytes than one process")
  endif()
endforeach()

# --ep must match the ranks mpirun started: an error on every rank, no output.
math(EXPR wrong "${NP} + 1")
execute_process(COMMAND ${MPIEXEC} ${FLAGS} -np ${NP} ${QMOE} moe run --ep ${wrong} ${in}
  --out ${WORK}/wrong.npy RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET TIMEOUT 60)
if(rc EQUAL 0 OR NOT err MATCHES "rank\\(s\\) are running" OR EXISTS ${WORK}/wrong.npy)
  message(FATAL_ERROR "--ep ${wrong} under -np ${NP}: exit ${rc}\n${err}")
endif()
message(STATUS "qmoe moe run --ep ${NP}: the same bytes as one process")
