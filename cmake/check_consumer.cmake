# CTest check (cmake -P) that an installed Ember can be used from outside:
# builds examples/consumer against the CMake package in PREFIX (installed by
# check_install.cmake) and runs it, then compiles a one-file program with
# only `pkg-config --cflags --libs ember` and runs that. Neither way may add
# a target-CPU flag (-march=..., -mavx2, ...) to the consumer's compile line:
# Ember's -march=native is its own. Variables: PREFIX, SOURCE
# (examples/consumer), WORK, CXX, GENERATOR.
include(${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake)

# Fails when a compile line holds a -m flag (-march, -mtune, -mavx512f, ...).
function(check_no_target_flags what line)
  if(line MATCHES "(^|[ \"])(-m[a-z0-9][^ \"]*)")
    message(FATAL_ERROR "${what} adds ${CMAKE_MATCH_2} to a consumer's compile line: ${line}")
  endif()
endfunction()

# find_package(Ember 0.1 CONFIG REQUIRED) and Ember::ember.
build_project("${SOURCE}" "${WORK}/build" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${PREFIX}"
              -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
run("${WORK}/build/consumer")
file(READ "${WORK}/build/compile_commands.json" commands)
string(JSON n LENGTH "${commands}")
if(n EQUAL 0)
  message(FATAL_ERROR "no compile command recorded for ${SOURCE}")
endif()
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON line GET "${commands}" ${i} command)
  check_no_target_flags("Ember::ember" "${line}")
endforeach()

# pkg-config alone.
file(WRITE "${WORK}/pc.cpp" "#include <cstdio>\n#include <ember/core/version.h>\n"
     "int main() { std::puts(ember::build_info().c_str()); return ember::version()[0] ? 0 : 1; }\n")
set(ENV{PKG_CONFIG_PATH} "${PREFIX}/lib/pkgconfig")
execute_process(COMMAND pkg-config --cflags --libs ember OUTPUT_VARIABLE flags RESULT_VARIABLE rc
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs ember failed")
endif()
check_no_target_flags("pkg-config ember" "${flags}")
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CXX} "${WORK}/pc.cpp" -o "${WORK}/pc_consumer" ${flags})
run("${WORK}/pc_consumer")
