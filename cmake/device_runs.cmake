# Helpers of the CTest scripts that run a demo on emulated cuda and on the
# CPU and compare the two (smoke_vit_cuda.cmake, smoke_seq2seq_cuda.cmake).
# Expects APP (the demo linked with the emulated CUDA backend) and COMPARE
# (tests/apps/compare_json) to be set.

# Runs APP with the given arguments; fails the test, with its stderr, unless
# it exits with 0.
function(run_app what)
  execute_process(COMMAND "${APP}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what}: exited with ${rc}\n${out}${err}")
  endif()
endfunction()

# The numbers at the JSON pointers given after RTOL and ATOL agree in files
# A and B: |a - b| <= ATOL + RTOL |a|. Prints the pairs compared.
function(expect_close what a b rtol atol)
  execute_process(COMMAND "${COMPARE}" "${a}" "${b}" ${rtol} ${atol} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  message(STATUS "${what}:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what}: the runs differ beyond rtol ${rtol} atol ${atol}")
  endif()
endfunction()

# An --eval-only result (eval.json) equals the figure recorded when the
# weights were saved: KEY against recorded_KEY, exactly.
function(expect_recorded what file key)
  file(READ "${file}" j)
  string(JSON got GET "${j}" ${key})
  string(JSON recorded GET "${j}" recorded_${key})
  if(NOT got EQUAL recorded)
    message(FATAL_ERROR "${what}: ${key} ${got}, recorded at save ${recorded}")
  endif()
endfunction()
