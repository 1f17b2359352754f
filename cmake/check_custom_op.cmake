# CTest check (cmake -P) of examples/custom_op against the installed Ember in
# PREFIX: configures and builds it as a user would, then runs test_rms_norm
# with the CUDA kernel on the SIMT emulator (its CUDA checks must run), and,
# when Ember was built with nvcc, test_rms_norm_gpu (the kernel compiled by
# nvcc; its CUDA checks skip without a GPU). Variables: PREFIX, SOURCE
# (examples/custom_op), WORK, CXX, GENERATOR, EMULATED (whether the emulated
# backend was installed).
include(${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake)

build_project("${SOURCE}" "${WORK}/build" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${PREFIX}")
if(EMULATED)
  run("${WORK}/build/test_rms_norm" --require-cuda)
else()
  run("${WORK}/build/test_rms_norm")
endif()
if(EXISTS "${WORK}/build/test_rms_norm_gpu")
  run("${WORK}/build/test_rms_norm_gpu")
endif()
