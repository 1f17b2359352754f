# What the GPT demo's smoke runs (smoke_gpt.cmake, smoke_gpt2.cmake) share:
# running the app where it must succeed, checking its PNG charts, the check
# that a run stopped and resumed equals the uninterrupted one, and the table
# of bad invocations that must each end in one line with their exit code.
# Variables: APP (the executable); GPT_SMOKE_FLAGS, flags every run_ok
# appends (a script's --threads 1 --quiet), may be empty.

# Runs APP with ARGN and GPT_SMOKE_FLAGS; a non-zero exit, or a run past 60
# seconds, fails the test with its stderr. Sets run_out and run_err.
function(run_ok)
  execute_process(COMMAND "${APP}" ${ARGN} ${GPT_SMOKE_FLAGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gpt ${ARGN} exited with ${rc}: ${err}")
  endif()
  set(run_out "${out}" PARENT_SCOPE)
  set(run_err "${err}" PARENT_SCOPE)
endfunction()

# Each file ARGN names under dir is a PNG (its 8-byte signature).
function(check_pngs dir)
  foreach(png ${ARGN})
    if(NOT EXISTS "${dir}/${png}")
      message(FATAL_ERROR "no ${png} in ${dir}")
    endif()
    file(READ "${dir}/${png}" sig LIMIT 8 HEX)
    if(NOT sig STREQUAL "89504e470d0a1a0a")
      message(FATAL_ERROR "${dir}/${png} is not a PNG (starts ${sig})")
    endif()
  endforeach()
endfunction()

# The run in directory b, stopped and resumed, against the uninterrupted one
# in a: the same losses (curves and final) and sample in metrics.json, and
# the weights file `weights` (a path inside each directory) bit for bit.
function(check_resumed_same a b weights what)
  file(READ "${a}/metrics.json" ja)
  file(READ "${b}/metrics.json" jb)
  foreach(key final_val_loss train_loss val_loss sample)
    string(JSON x GET "${ja}" ${key})
    string(JSON y GET "${jb}" ${key})
    if(NOT x STREQUAL y)
      message(FATAL_ERROR "${what}: the resumed run differs in ${key}: ${x} against ${y}")
    endif()
  endforeach()
  file(SHA256 "${a}/${weights}" ha)
  file(SHA256 "${b}/${weights}" hb)
  if(NOT ha STREQUAL hb)
    message(FATAL_ERROR "${what}: the resumed run's ${weights} differs")
  endif()
endfunction()

# Bad input: each case of `cases` ("code|arg,arg,...") runs APP with its
# arguments, --quiet --threads 1 and then ARGN, and must exit with code
# (2 for flags, 1 for files) after exactly one line on stderr.
function(check_bad_invocations cases)
  foreach(case ${cases})
    string(REPLACE "|" ";" parts "${case}")
    string(REPLACE "," ";" parts "${parts}")
    list(GET parts 0 want)
    list(REMOVE_AT parts 0)
    execute_process(COMMAND "${APP}" ${parts} --quiet --threads 1 ${ARGN} RESULT_VARIABLE rc OUTPUT_QUIET
                    ERROR_VARIABLE err TIMEOUT 60)
    string(STRIP "${err}" err)
    string(FIND "${err}" "\n" nl)
    if(NOT rc STREQUAL want OR err STREQUAL "" OR NOT nl EQUAL -1)
      message(FATAL_ERROR "gpt ${parts}: exit ${rc} (expected ${want}), stderr: ${err}")
    endif()
  endforeach()
endfunction()
