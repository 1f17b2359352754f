# Install rules (included by CMakeLists.txt when EMBER_INSTALL is on):
#   cmake --install build --prefix P
# gives the layers' archives P/lib/libember_{ops,optim,nn}.a, the headers
# under P/include/ember/ (the real files: the build tree only links to the
# source folders), the CMake package (P/lib/cmake/Ember:
# find_package(Ember 0.1 CONFIG REQUIRED), target Ember::ember, which links
# the three) and P/lib/pkgconfig/ember.pc. The CUDA backends come as
# object files with their own targets, each in its own export file so that
# a CPU-only consumer needs no CUDA toolkit: Ember::ember_cuda_emu (the
# emulated backend, component cuda_emu) and, when nvcc built it,
# Ember::ember_cuda (component cuda), with cmake/EmberCuda.cmake's
# ember_add_cuda_sources() for kernels of the user's own. ONNX export and
# import come the same way: Ember::ember_onnx (component onnx), its archive
# libember_onnx.a, in its own export file, so that only a consumer who asks
# for it needs libonnx and protobuf.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(EMBER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Ember)

install(TARGETS ember ember_nn ember_optim ember_ops EXPORT EmberTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(part ${EMBER_HEADER_PARTS})
  if(EXISTS ${PROJECT_SOURCE_DIR}/${part})
    # ops/sgemm_avx512.h is compiled by the build's -march (its kernel exists
    # only under __AVX512F__): Ember's own sources use it, and it stays out of
    # the package, so no installed header differs by a consumer's flags.
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${part}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember/${part}
            FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh" PATTERN "sgemm_avx512.h" EXCLUDE)
  endif()
endforeach()
install(FILES ${EMBER_INCLUDE_ROOT}/ember/ember.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember)

install(EXPORT EmberTargets NAMESPACE Ember:: DESTINATION ${EMBER_CMAKE_DIR})
install(TARGETS ember_onnx EXPORT EmberOnnxTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT EmberOnnxTargets NAMESPACE Ember:: DESTINATION ${EMBER_CMAKE_DIR})
set(EMBER_HAS_CUDA_EMU OFF)
if(TARGET ember_cuda_emu)
  set(EMBER_HAS_CUDA_EMU ON)
  install(TARGETS ember_cuda_emu EXPORT EmberCudaEmuTargets OBJECTS DESTINATION ${CMAKE_INSTALL_LIBDIR}/ember/cuda_emu)
  install(EXPORT EmberCudaEmuTargets NAMESPACE Ember:: DESTINATION ${EMBER_CMAKE_DIR})
endif()
if(TARGET ember_cuda)
  install(TARGETS ember_cuda EXPORT EmberCudaTargets OBJECTS DESTINATION ${CMAKE_INSTALL_LIBDIR}/ember/cuda)
  install(EXPORT EmberCudaTargets NAMESPACE Ember:: DESTINATION ${EMBER_CMAKE_DIR})
endif()
configure_package_config_file(cmake/EmberConfig.cmake.in ${PROJECT_BINARY_DIR}/EmberConfig.cmake
                              INSTALL_DESTINATION ${EMBER_CMAKE_DIR})
# 0.x: a minor version may break the API, so 0.1 accepts 0.1.* only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/EmberConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/EmberConfig.cmake ${PROJECT_BINARY_DIR}/EmberConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/EmberCuda.cmake DESTINATION ${EMBER_CMAKE_DIR})

# pkg-config: the flags a consumer needs, C++20 and nothing about the target
# CPU (Ember's -march is its own; its installed headers do not depend on it).
set(EMBER_PC_CFLAGS "-std=c++20")
# The prefix relative to the .pc file, so `cmake --install --prefix P` (which
# picks the prefix after configuring) still gives correct paths.
file(RELATIVE_PATH EMBER_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/ember.pc.in ${PROJECT_BINARY_DIR}/ember.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/ember.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
