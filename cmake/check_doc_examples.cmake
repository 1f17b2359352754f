# CTest check (cmake -P) of the C++ blocks of README.md and docs/*.md
# (cmake/doc_examples.cmake): builds target ember_doc_examples in BUILD (every
# document's fragments and every program), then runs each program listed in
# PROGRAMS, which must exit with 0. Variables: BUILD, PROGRAMS.
execute_process(COMMAND ${CMAKE_COMMAND} --build "${BUILD}" --target ember_doc_examples --parallel 2
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "a code block of README.md or docs/*.md does not compile (the errors above name its line)")
endif()
file(STRINGS "${PROGRAMS}" programs)
foreach(program IN LISTS programs)
  execute_process(COMMAND "${program}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${program} (a program in the docs) exited with ${rc}")
  endif()
  message(STATUS "ran ${program}")
endforeach()
