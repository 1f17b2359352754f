# CTest check (cmake -P) that a project can vendor Ember with FetchContent:
# configures examples/fetchcontent with Ember's source tree as the content
# (no network), builds it (Ember's library is compiled inside that build)
# and runs its program. Variables: SOURCE (examples/fetchcontent),
# EMBER_SOURCE (this source tree), WORK, CXX, GENERATOR.
include(${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake)

# A Debug build without the CUDA backend and without debug information: the
# library compiles fastest so, and the program (XOR with a tiny MLP) needs
# neither. Only the program's target is built, which compiles the libraries
# Ember::ember links (core, ops, nn, optim) and not ember_onnx: the same
# sources the top-level build compiles, so what this checks is how a
# sub-project configures and links.
build_project("${SOURCE}" "${WORK}/build" TARGET consumer -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0
              "-DEMBER_SOURCE_DIR=${EMBER_SOURCE}" -DEMBER_CUDA=OFF)
run("${WORK}/build/consumer")
