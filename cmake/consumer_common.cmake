# Shared by the CTest scripts that build a project outside Ember's tree the
# way a user would (check_consumer, check_custom_op, check_fetchcontent):
# run() runs a command in WORK and fails the test with the command line, and
# build_project() configures and builds a CMake project with the compiler
# and generator of Ember's build (2 jobs). Variables: WORK, CXX, GENERATOR.
function(run)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}")
  endif()
endfunction()

# build_project(<source dir> <build dir> [TARGET <target>] [cmake -D arguments...])
# TARGET builds that target and what it needs instead of everything.
function(build_project source build)
  cmake_parse_arguments(ARG "" "TARGET" "" ${ARGN})
  set(target_args)
  if(ARG_TARGET)
    set(target_args --target ${ARG_TARGET})
  endif()
  run(${CMAKE_COMMAND} -S "${source}" -B "${build}" -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX}
      ${ARG_UNPARSED_ARGUMENTS})
  run(${CMAKE_COMMAND} --build "${build}" ${target_args} --parallel 2)
endfunction()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
