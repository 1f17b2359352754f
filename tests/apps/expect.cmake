# The checks the app-refusal scripts (damaged_files.cmake,
# resume_and_refusals.cmake) share, each running the command in ARGN with a
# limit of EXPECT_TIMEOUT seconds (default 60):
#   expect(what code pattern): exit `code` and, unless 0, exactly one line on
#     stderr matching pattern;
#   expect_warned(what code warning pattern): exit `code` and two lines, a
#     warning matching `warning`, then the error matching pattern;
#   rewrite(in out ...): tests/apps/rewrite_safetensors.cpp (REWRITE) copies
#     in to out with the edits in ARGN, or the script stops.
if(NOT EXPECT_TIMEOUT)
  set(EXPECT_TIMEOUT 60)
endif()
function(expect what code pattern)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT ${EXPECT_TIMEOUT})
  string(STRIP "${err}" e)
  string(REGEX MATCHALL "\n" nl "${e}")
  list(LENGTH nl extra)
  if(NOT rc STREQUAL "${code}" OR NOT e MATCHES "${pattern}" OR (NOT code EQUAL 0 AND extra GREATER 0))
    message(FATAL_ERROR "${what}: exit ${rc} (expected ${code}), stderr (expected one line matching '${pattern}'):\n${err}")
  endif()
endfunction()
function(expect_warned what code warning pattern)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT ${EXPECT_TIMEOUT})
  string(STRIP "${err}" e)
  string(REGEX MATCHALL "\n" nl "${e}")
  list(LENGTH nl extra)
  if(NOT rc STREQUAL "${code}" OR NOT e MATCHES "^[^\n]*${warning}[^\n]*\n[^\n]*${pattern}" OR NOT extra EQUAL 1)
    message(FATAL_ERROR "${what}: exit ${rc} (expected ${code}), stderr (expected a warning matching '${warning}' "
                        "and one line matching '${pattern}'):\n${err}")
  endif()
endfunction()
function(rewrite in out)
  execute_process(COMMAND "${REWRITE}" "${in}" "${out}" ${ARGN} RESULT_VARIABLE rc ERROR_VARIABLE err
                  TIMEOUT ${EXPECT_TIMEOUT})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "rewrite_safetensors ${ARGN} exited with ${rc}:\n${err}")
  endif()
endfunction()
