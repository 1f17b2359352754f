# Ember's layers as CMake targets (included by CMakeLists.txt; the picture is
# in docs/ARCHITECTURE.md, "Layers").
#
#   ember_layer_headers(<root> <part>...)
#     Makes <root>/ember/<part> a link to each source folder <part>, so that
#     <root> on the include path offers <ember/<part>/...> for those parts
#     and no others.
#   ember_layer(<target> PARTS <folder>... [DEPENDS <layer target>...])
#     A static library of every .cpp in the folders, which sees the headers
#     of its own folders and, through DEPENDS, of the layers below; an
#     #include of a higher layer's header is "No such file" at compile time.
#     New sources in a folder are picked up at the next build (glob with
#     CONFIGURE_DEPENDS).

function(ember_layer_headers root)
  file(MAKE_DIRECTORY ${root}/ember)
  foreach(part ${ARGN})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${part} ${root}/ember/${part} SYMBOLIC)
  endforeach()
endfunction()

function(ember_layer target)
  cmake_parse_arguments(ARG "" "" "PARTS;DEPENDS" ${ARGN})
  set(root ${PROJECT_BINARY_DIR}/include/layers/${target})
  ember_layer_headers(${root} ${ARG_PARTS})
  set(sources)
  foreach(part ${ARG_PARTS})
    file(GLOB part_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${part}/*.cpp)
    list(APPEND sources ${part_sources})
  endforeach()
  add_library(${target} STATIC ${sources})
  add_library(Ember::${target} ALIAS ${target})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}> $<INSTALL_INTERFACE:include>)
  target_link_libraries(${target} PUBLIC ${ARG_DEPENDS})
  # Ember's headers need C++20 (concepts, designated initialisers): every
  # consumer gets it, installed or vendored.
  target_compile_features(${target} PUBLIC cxx_std_20)
  # No FP-exception semantics and no errno from libm: lets the compiler
  # if-convert and vectorise the kernels (values are unchanged).
  # -fopenmp-simd honours `#pragma omp simd reduction(...)` on the row
  # reductions (softmax, layer_norm, cross_entropy), which may then sum in
  # vector lanes; it needs no OpenMP runtime.
  target_compile_options(${target} PRIVATE -Wall -Wextra -fno-trapping-math -fno-math-errno -fopenmp-simd)
  # -march=native is Ember's own (PRIVATE): a program that links Ember keeps
  # its own flags. No installed header depends on the target's ISA, and the
  # kernels that use AVX-512 whatever the flags choose it by CPUID at run time.
  if(EMBER_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>
                                             $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-march=native>)
  endif()
endfunction()
