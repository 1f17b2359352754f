# CTest check (cmake -P) that a project can vendor Ember with FetchContent:
# configures examples/fetchcontent with Ember's source tree as the content
# (no network), builds it (Ember's library is compiled inside that build)
# and runs its program. Variables: SOURCE (examples/fetchcontent),
# EMBER_SOURCE (this source tree), WORK, CXX, GENERATOR.
include(${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake)

# A Debug build without the CUDA backend: the library compiles fastest
# without optimisation, and the program (XOR with a tiny MLP) needs none.
build_project("${SOURCE}" "${WORK}/build" -DCMAKE_BUILD_TYPE=Debug "-DEMBER_SOURCE_DIR=${EMBER_SOURCE}"
              -DEMBER_CUDA=OFF)
run("${WORK}/build/consumer")
