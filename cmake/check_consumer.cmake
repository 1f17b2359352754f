# CTest check (cmake -P) that an installed Ember can be used from outside:
# builds examples/consumer against the CMake package in PREFIX (installed by
# check_install.cmake) and runs it, then compiles a one-file program with
# only `pkg-config --cflags --libs ember` and runs that. Variables: PREFIX,
# SOURCE (examples/consumer), WORK, CXX, GENERATOR.
include(${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake)

# find_package(Ember 0.1 CONFIG REQUIRED) and Ember::ember.
build_project("${SOURCE}" "${WORK}/build" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${PREFIX}")
run("${WORK}/build/consumer")

# pkg-config alone.
file(WRITE "${WORK}/pc.cpp" "#include <cstdio>\n#include <ember/core/version.h>\n"
     "int main() { std::puts(ember::build_info().c_str()); return ember::version()[0] ? 0 : 1; }\n")
set(ENV{PKG_CONFIG_PATH} "${PREFIX}/lib/pkgconfig")
execute_process(COMMAND pkg-config --cflags --libs ember OUTPUT_VARIABLE flags RESULT_VARIABLE rc
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs ember failed")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CXX} "${WORK}/pc.cpp" -o "${WORK}/pc_consumer" ${flags})
run("${WORK}/pc_consumer")
