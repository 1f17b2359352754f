# CTest check (cmake -P), the setup of the tests that use an installed Ember
# (fixture ember_installed): installs BUILD into PREFIX and checks that the
# headers are real files and that the package holds what consumers need.
# Variables: BUILD, PREFIX.
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD}" --prefix "${PREFIX}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD} --prefix ${PREFIX} failed (${rc})")
endif()

# The build tree links include/ember/<part> to the sources; an install must
# hold the files themselves.
file(GLOB_RECURSE headers LIST_DIRECTORIES true "${PREFIX}/include/ember/*")
foreach(h ${headers})
  if(IS_SYMLINK "${h}")
    message(FATAL_ERROR "installed header path is a symbolic link: ${h}")
  endif()
endforeach()
# What an op of one's own includes, CUDA kernels included (docs/CUSTOM_OPS.md).
foreach(h ember.h core/tensor.h core/version.h core/dispatch.h core/autograd.h nn/module.h optim/optimizer.h
          ops/gradcheck.h ops/pointwise_register.h testing/conformance.h cuda/common.h cuda/block_reduce.cuh cuda/emu/simt.h cuda/emu/cuda_api.h)
  if(NOT EXISTS "${PREFIX}/include/ember/${h}")
    message(FATAL_ERROR "not installed: include/ember/${h}")
  endif()
endforeach()
# A program compiled with other flags than Ember's must see the same
# headers: no installed header may choose code by the target's ISA macros
# (__AVX512F__, __AVX2__, ...), or an inline function would have two
# definitions. Kernels choose by CPUID at run time instead.
file(GLOB_RECURSE installed "${PREFIX}/include/ember/*.h" "${PREFIX}/include/ember/*.cuh")
foreach(h ${installed})
  file(STRINGS "${h}" lines REGEX "^[ \t]*#[ \t]*(if|ifdef|ifndef|elif).*__(AVX|SSE|FMA|F16C|BMI|ARM_NEON|ARM_FEATURE)")
  if(lines)
    message(FATAL_ERROR "installed header ${h} depends on the target ISA: ${lines}")
  endif()
endforeach()
if(EXISTS "${PREFIX}/include/ember/ops/sgemm_avx512.h")
  message(FATAL_ERROR "ops/sgemm_avx512.h (compiled by the build's -march) is installed")
endif()
foreach(f EmberConfig.cmake EmberConfigVersion.cmake EmberTargets.cmake EmberCuda.cmake)
  if(NOT EXISTS "${PREFIX}/lib/cmake/Ember/${f}")
    message(FATAL_ERROR "not installed: lib/cmake/Ember/${f}")
  endif()
endforeach()
