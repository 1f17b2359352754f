# CTest check (cmake -P) that Ember installs and can be used from outside:
# installs BUILD into WORK/prefix, checks that the headers are real files,
# builds examples/consumer against the installed CMake package and runs it,
# then compiles a one-file program with only `pkg-config --cflags --libs
# ember` and runs that. Variables: BUILD, SOURCE (examples/consumer), WORK,
# CXX (the compiler), GENERATOR.
file(REMOVE_RECURSE "${WORK}")
set(prefix "${WORK}/prefix")

function(run)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}")
  endif()
endfunction()

file(MAKE_DIRECTORY "${WORK}")
run(${CMAKE_COMMAND} --install "${BUILD}" --prefix "${prefix}")

# The build tree links include/ember/<part> to the sources; an install must
# hold the files themselves.
file(GLOB_RECURSE headers LIST_DIRECTORIES true "${prefix}/include/ember/*")
foreach(h ${headers})
  if(IS_SYMLINK "${h}")
    message(FATAL_ERROR "installed header path is a symbolic link: ${h}")
  endif()
endforeach()
foreach(h ember.h core/tensor.h core/version.h nn/module.h optim/optimizer.h)
  if(NOT EXISTS "${prefix}/include/ember/${h}")
    message(FATAL_ERROR "not installed: include/ember/${h}")
  endif()
endforeach()

# find_package(Ember 0.1 CONFIG REQUIRED) and Ember::ember.
run(${CMAKE_COMMAND} -S "${SOURCE}" -B "${WORK}/build" -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_CXX_COMPILER=${CXX} "-DCMAKE_PREFIX_PATH=${prefix}")
run(${CMAKE_COMMAND} --build "${WORK}/build")
run("${WORK}/build/consumer")

# pkg-config alone.
file(WRITE "${WORK}/pc.cpp" "#include <cstdio>\n#include <ember/core/version.h>\n"
     "int main() { std::puts(ember::build_info().c_str()); return ember::version()[0] ? 0 : 1; }\n")
set(ENV{PKG_CONFIG_PATH} "${prefix}/lib/pkgconfig")
execute_process(COMMAND pkg-config --cflags --libs ember OUTPUT_VARIABLE flags RESULT_VARIABLE rc
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs ember failed")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CXX} "${WORK}/pc.cpp" -o "${WORK}/pc_consumer" ${flags})
run("${WORK}/pc_consumer")
