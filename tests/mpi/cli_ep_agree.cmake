# `qmoe moe run --ep 2` and `qmoe bench moe --ep 2` with ranks given other files or options (an
# MPMD job, `mpirun -np 1 A : -np 1 B`): each case ends within the time limit, non-zero, with the
# same one-line reason on both ranks, and --out keeps its old bytes.
# -DQMOE=<qmoe> -DMPIEXEC=<mpirun> "-DFLAGS=<its flags>" -DWORK=<a scratch folder>
cmake_minimum_required(VERSION 3.16)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(gen dir)
  execute_process(COMMAND ${QMOE} moe gen --out ${WORK}/${dir} --H 64 --I 32 --E 4 --top-k 2 ${ARGN}
    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gen ${dir}: exit ${rc}\n${err}")
  endif()
endfunction()
gen(a --tokens 8 --seed 1)
gen(b --tokens 100 --seed 1)
gen(c --tokens 8 --seed 2) # other weights (its header's qmoe.seed differs) and other inputs

set(out ${WORK}/out.npy)
function(inputs var layer hidden)
  set(${var} moe run --ep 2 --threads 1 --layer ${WORK}/${layer}/layer.safetensors
    --hidden ${WORK}/${hidden}/hidden.npy --router-logits ${WORK}/${hidden}/router_logits.npy
    --out ${out} PARENT_SCOPE)
endfunction()
inputs(A a a)
inputs(TOK a b)  # a's layer, 100 tokens
inputs(LAY c a)  # c's layer, a's tokens
inputs(HID a c)  # a's layer, c's 8 tokens
set(BENCH bench moe --ep 2 --model qwen3-30b-a3b --experts 8 --threads 1 --seconds 0.05 --tokens 16)

# case: what, rank 0's arguments, rank 1's (lists joined by '|'), then the reason both print
function(refused what r0 r1 reason0 reason1)
  file(WRITE ${out} "old bytes")
  string(REPLACE "|" ";" r0 "${r0}")
  string(REPLACE "|" ";" r1 "${r1}")
  execute_process(COMMAND ${MPIEXEC} ${FLAGS} -np 1 ${QMOE} ${r0} : -np 1 ${QMOE} ${r1}
    RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e TIMEOUT 60)
  file(READ ${out} kept)
  if(rc EQUAL 0 OR NOT kept STREQUAL "old bytes" OR NOT e MATCHES "${reason0}" OR NOT e MATCHES "${reason1}")
    message(FATAL_ERROR "${what}: exit ${rc}, --out ${kept}\n${o}\n${e}")
  endif()
  message(STATUS "${what}: refused on both ranks")
endfunction()

string(REPLACE ";" "|" A "${A}")
string(REPLACE ";" "|" TOK "${TOK}")
string(REPLACE ";" "|" LAY "${LAY}")
string(REPLACE ";" "|" HID "${HID}")
string(REPLACE ";" "|" BENCH "${BENCH}")
set(both "the ranks disagree on")
refused("8 tokens on rank 0, 100 on rank 1" "${A}" "${TOK}"
  "rank 0 of 2\\): ${both} --hidden's tokens \\(rows\\): rank 0 has 8, rank 1 has 100"
  "rank 1 of 2\\): ${both} --hidden's tokens \\(rows\\): rank 0 has 8, rank 1 has 100")
refused("100 tokens on rank 0, 8 on rank 1" "${TOK}" "${A}"
  "rank 0 of 2\\): ${both} --hidden's tokens \\(rows\\): rank 0 has 100, rank 1 has 8"
  "rank 1 of 2\\): ${both} --hidden's tokens \\(rows\\): rank 0 has 100, rank 1 has 8")
refused("another layer file on rank 1" "${A}" "${LAY}"
  "rank 0 of 2\\): ${both} the --layer file's header" "rank 1 of 2\\): ${both} the --layer file's header")
refused("other hidden states of the same shape on rank 1" "${A}" "${HID}"
  "rank 0 of 2\\): ${both} --hidden's data" "rank 1 of 2\\): ${both} --hidden's data")
refused("--top-k 1 on rank 1 only" "${A}" "${A}|--top-k|1"
  "rank 0 of 2\\): ${both} --top-k: rank 0 has 2, rank 1 has 1" "rank 1 of 2\\): ${both} --top-k: rank 0 has 2, rank 1 has 1")
refused("--mode a8w4 on rank 0 only" "${A}|--mode|a8w4" "${A}"
  "rank 0 of 2\\): ${both} --mode" "rank 1 of 2\\): ${both} --mode")
string(REPLACE "--ep|2" "--ep|3" A3 "${A}")
refused("--ep 3 on rank 1" "${A}" "${A3}"
  "another rank was given another --ep" "--ep 3, but 2 rank\\(s\\) are running")
string(REPLACE "--ep|2|" "" A1 "${A}")
refused("--ep on rank 0 only" "${A}" "${A1}"
  "another rank was started without --ep" "another rank was given --ep")
refused("a refused argument on rank 1" "${A}" "${A}|--top-k|0"
  "another rank refused its arguments" "--top-k: '0' is not an integer")
refused("bench: --tokens 16 on rank 0, 32 on rank 1" "${BENCH}" "${BENCH}|--tokens|32"
  "rank 0 of 2\\): ${both} --tokens' count 1: rank 0 has 16, rank 1 has 32"
  "rank 1 of 2\\): ${both} --tokens' count 1: rank 0 has 16, rank 1 has 32")
refused("bench: --seconds 0.05 on rank 0, 0.1 on rank 1" "${BENCH}" "${BENCH}|--seconds|0.1"
  "rank 0 of 2\\): ${both} --seconds: rank 0 has 0.05, rank 1 has 0.1"
  "rank 1 of 2\\): ${both} --seconds: rank 0 has 0.05, rank 1 has 0.1")
string(REPLACE "--ep|2|" "" BENCH1 "${BENCH}")
refused("bench: --ep on rank 1 only" "${BENCH1}" "${BENCH}"
  "another rank was given --ep" "another rank was started without --ep")
refused("bench: a refused argument on rank 0" "${BENCH}|--threads|0" "${BENCH}"
  "another rank refused its arguments" "--threads: '0' is not an integer")

# and the same arguments on both ranks still run, and write
file(REMOVE ${out})
string(REPLACE "|" ";" A "${A}")
execute_process(COMMAND ${MPIEXEC} ${FLAGS} -np 2 ${QMOE} ${A} RESULT_VARIABLE rc ERROR_VARIABLE e
  OUTPUT_QUIET TIMEOUT 60)
if(NOT rc EQUAL 0 OR NOT EXISTS ${out})
  message(FATAL_ERROR "the same arguments on both ranks: exit ${rc}\n${e}")
endif()
