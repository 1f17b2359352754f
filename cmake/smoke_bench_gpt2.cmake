# CTest (cmake -P) of bench's GPT-2 run from files (apps/bench/gpt2_files.cpp)
# on the tiny GPT-2 fixture (2 layers, width 32, vocabulary 96, context 16;
# the same weights as llm.c's file and as a Hugging Face directory) and token
# files written by make_llmc_tokens: the run records one loss per step and
# learns a repeated batch; llm.c's file and the HF directory give the same
# run; bad token files, a truncated checkpoint and flags that do not fit the
# model end in one line on stderr naming the file (or the flag), before any
# measuring. Needs neither llm.c nor PyTorch.
# Variables: APP (bench), MAKE_TOKENS (make_llmc_tokens), TINY
# (tests/fixtures/gpt2_tiny), OUT (a scratch directory).
file(REMOVE_RECURSE "${OUT}")
execute_process(COMMAND "${MAKE_TOKENS}" "${OUT}" "${TINY}/llmc.bin" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_llmc_tokens exited with ${rc}")
endif()
set(ck "${TINY}/llmc.bin")
set(base --workload gpt2 --gpt2-batch 2 --threads 1)
set(small ${base} --gpt2-seq 8)

function(run_ok)
  execute_process(COMMAND "${APP}" ${small} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "bench ${ARGN} exited with ${rc}: ${err}")
  endif()
endfunction()

# The losses of the run in JSON file f, as a list.
function(read_losses f steps var)
  file(READ "${f}" j)
  string(JSON n LENGTH "${j}" records)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "${f}: ${n} records, expected the run's one")
  endif()
  string(JSON nl LENGTH "${j}" records 0 losses)
  string(JSON nt LENGTH "${j}" records 0 step_ms)
  if(NOT nl EQUAL steps OR NOT nt EQUAL steps)
    message(FATAL_ERROR "${f}: ${nl} losses and ${nt} step times, expected ${steps}")
  endif()
  set(out "")
  math(EXPR last "${steps} - 1")
  foreach(i RANGE ${last})
    string(JSON l GET "${j}" records 0 losses ${i})
    if(NOT l MATCHES "^[0-9]+\\.[0-9]+(e[-+]?[0-9]+)?$")
      message(FATAL_ERROR "${f}: loss ${i} is ${l}")
    endif()
    list(APPEND out "${l}")
  endforeach()
  set(${var} "${out}" PARENT_SCOPE)
endfunction()

# --check reads the files and stops.
run_ok(--check --gpt2-checkpoint "${ck}" --gpt2-tokens "${OUT}/three.bin")

# One batch, repeated: the bench recipe (lr 3e-4) learns it, step after step.
run_ok(--gpt2-checkpoint "${ck}" --gpt2-tokens "${OUT}/one_batch.bin" --steps 4 --precision fp32
       --json "${OUT}/one_batch.json")
read_losses("${OUT}/one_batch.json" 4 l)
list(GET l 0 first)
list(GET l 3 fourth)
if(NOT fourth LESS first)
  message(FATAL_ERROR "the repeated batch's loss did not fall: ${l}")
endif()

# llm.c's recipe on three batches, from llm.c's file and from the Hugging
# Face directory of the same weights: the same losses.
run_ok(--gpt2-checkpoint "${ck}" --gpt2-tokens "${OUT}/three.bin" --gpt2-recipe llmc --steps 3 --precision fp32
       --json "${OUT}/llmc.json")
run_ok(--gpt2-checkpoint "${TINY}" --gpt2-tokens "${OUT}/three.bin" --gpt2-recipe llmc --steps 3 --precision fp32
       --json "${OUT}/hf.json")
read_losses("${OUT}/llmc.json" 3 a)
read_losses("${OUT}/hf.json" 3 b)
# A loss in millionths, as an integer (cmake's math has no floating point).
function(micro x var)
  if(NOT x MATCHES "^([0-9]+)\\.([0-9]*)$")
    message(FATAL_ERROR "loss ${x} is not a plain decimal")
  endif()
  set(whole "${CMAKE_MATCH_1}")
  string(SUBSTRING "${CMAKE_MATCH_2}000000" 0 6 frac)
  string(REGEX REPLACE "^0+([0-9])" "\\1" frac "${frac}")
  math(EXPR v "${whole} * 1000000 + ${frac}")
  set(${var} ${v} PARENT_SCOPE)
endfunction()
foreach(i 0 1 2)
  list(GET a ${i} x)
  list(GET b ${i} y)
  micro(${x} mx)
  micro(${y} my)
  math(EXPR d "${mx} - ${my}")
  if(d GREATER 2 OR d LESS -2)
    message(FATAL_ERROR "llm.c's file and the HF directory gave different losses: ${a} vs ${b}")
  endif()
endforeach()

# Bad files and flags: exit code, one line on stderr, and what it must name.
function(run_bad code expect)
  execute_process(COMMAND "${APP}" --check ${base} ${ARGN} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err
                  TIMEOUT 60)
  string(STRIP "${err}" stripped)
  string(FIND "${stripped}" "\n" nl)
  string(FIND "${stripped}" "${expect}" at)
  if(NOT rc EQUAL code OR NOT nl EQUAL -1 OR at EQUAL -1)
    message(FATAL_ERROR "bench ${ARGN}: exit ${rc} (expected ${code}), stderr '${err}' (expected one line with "
                        "'${expect}')")
  endif()
endfunction()
set(s8 --gpt2-seq 8 --gpt2-checkpoint "${ck}")
foreach(bad truncated long magic header big_token)
  run_bad(1 "${OUT}/${bad}.bin" ${s8} --gpt2-tokens "${OUT}/${bad}.bin")
endforeach()
run_bad(1 "truncated: the header gives 17 tokens" ${s8} --gpt2-tokens "${OUT}/truncated.bin")
run_bad(1 "bad magic 20240326" ${s8} --gpt2-tokens "${OUT}/magic.bin")
run_bad(1 "token 500 at position 9" ${s8} --gpt2-tokens "${OUT}/big_token.bin")
run_bad(2 "${OUT}/short.bin" ${s8} --gpt2-tokens "${OUT}/short.bin")
run_bad(1 "${OUT}/truncated_checkpoint.bin" --gpt2-seq 8 --gpt2-checkpoint "${OUT}/truncated_checkpoint.bin")
run_bad(2 "--gpt2-seq 32" --gpt2-seq 32 --gpt2-checkpoint "${ck}")
execute_process(COMMAND "${APP}" --check --workload vit --gpt2-tokens "${OUT}/three.bin" RESULT_VARIABLE rc
                OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 2 OR NOT err MATCHES "not for --workload vit")
  message(FATAL_ERROR "--gpt2-tokens with --workload vit: exit ${rc}, '${err}'")
endif()
