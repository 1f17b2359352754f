# The transports of data-parallel training (ops/collective.h,
# docs/DISTRIBUTED.md); included by CMakeLists.txt once the `ember` target
# and the CUDA decision exist.
#  - EMBER_MPI (AUTO, ON, OFF): MPI for CPU tensors and for starting the
#    process group (Debian: libopenmpi-dev, openmpi-bin). Only MPI's C API is
#    called, through the CXX component (a consumer's project need not enable
#    C); MPI_CXX_SKIP_MPICXX keeps the old C++ bindings out of the headers.
#    Linked PUBLIC into the static `ember_ops`, whose consumers need libmpi too;
#    the installed EmberConfig.cmake finds MPI again and ember.pc names its
#    libraries.
#  - EMBER_NCCL (AUTO, ON, OFF; needs the CUDA backend and MPI): NCCL for CUDA
#    tensors, cuda/collective_nccl.cu in ember_cuda (cuda/CMakeLists.txt),
#    with nccl.h and libnccl from the CUDA toolkit or NCCL_HOME.
# Without them a process is a world of one; everything else builds and runs.
set(EMBER_MPI AUTO CACHE STRING "MPI for distributed training: AUTO, ON or OFF")
set_property(CACHE EMBER_MPI PROPERTY STRINGS AUTO ON OFF)
set(EMBER_NCCL AUTO CACHE STRING "NCCL for distributed training of CUDA tensors: AUTO, ON or OFF")
set_property(CACHE EMBER_NCCL PROPERTY STRINGS AUTO ON OFF)
foreach(opt EMBER_MPI EMBER_NCCL)
  string(TOUPPER "${${opt}}" ${opt})
  if(NOT ${opt} MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${opt} must be AUTO, ON or OFF, got '${${opt}}'")
  endif()
endforeach()

set(EMBER_MPI_ENABLED OFF)
set(EMBER_PC_MPI_LIBS "")
if(EMBER_MPI STREQUAL "OFF")
  message(STATUS "Ember: MPI off (EMBER_MPI=OFF): every process is a world of one")
elseif((EMBER_SANITIZE OR EMBER_FUZZ) AND EMBER_MPI STREQUAL "AUTO")
  # Open MPI's own allocations at exit are reported as leaks; the sanitizer
  # builds test everything else.
  message(STATUS "Ember: MPI off in a sanitizer build (EMBER_MPI=ON to force it)")
else()
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(EMBER_MPI_ENABLED ON)
    target_link_libraries(ember_ops PUBLIC MPI::MPI_CXX)
    target_compile_definitions(ember_ops PRIVATE EMBER_HAVE_MPI)
    foreach(lib ${MPI_CXX_LIBRARIES})
      string(APPEND EMBER_PC_MPI_LIBS " ${lib}")
    endforeach()
    # How the tests start 2 processes on this machine: shared memory only
    # (no network), more processes than cores allowed, and Open MPI's
    # consent to run as root (CI containers do).
    execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE mpiexec_version ERROR_QUIET)
    string(REGEX MATCH "[^\n]*" mpiexec_version "${mpiexec_version}")
    set(EMBER_MPIEXEC_2 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2)
    if(mpiexec_version MATCHES "Open MPI|OpenRTE")
      list(APPEND EMBER_MPIEXEC_2 --oversubscribe)
    endif()
    list(APPEND EMBER_MPIEXEC_2 ${MPIEXEC_PREFLAGS})
    set(EMBER_MPI_TEST_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
                           OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
                           EMBER_NUM_THREADS=1)
    message(STATUS "Ember: MPI on (${MPIEXEC_EXECUTABLE}: ${mpiexec_version})")
  elseif(EMBER_MPI STREQUAL "ON")
    message(FATAL_ERROR "EMBER_MPI=ON, but no MPI was found: install libopenmpi-dev and openmpi-bin "
                        "(scripts/setup.sh does), or use EMBER_MPI=AUTO/OFF")
  else()
    message(STATUS "Ember: MPI off (none found; EMBER_MPI=AUTO): every process is a world of one")
  endif()
endif()

set(EMBER_NCCL_ENABLED OFF)
if(EMBER_NCCL STREQUAL "OFF")
  message(STATUS "Ember: NCCL off (EMBER_NCCL=OFF)")
elseif(NOT EMBER_CUDA_ENABLED OR NOT EMBER_MPI_ENABLED)
  # NCCL runs on the CUDA backend, and its processes exchange their
  # communicator's id over MPI.
  if(EMBER_NCCL STREQUAL "ON")
    message(FATAL_ERROR "EMBER_NCCL=ON needs the CUDA backend (EMBER_CUDA, nvcc) and MPI (EMBER_MPI)")
  endif()
  message(STATUS "Ember: NCCL off (it needs the CUDA backend and MPI)")
else()
  find_path(EMBER_NCCL_INCLUDE_DIR nccl.h HINTS ENV NCCL_HOME ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(EMBER_NCCL_LIBRARY nccl HINTS ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  if(EMBER_NCCL_INCLUDE_DIR AND EMBER_NCCL_LIBRARY)
    set(EMBER_NCCL_ENABLED ON)
    message(STATUS "Ember: NCCL on (${EMBER_NCCL_LIBRARY})")
  elseif(EMBER_NCCL STREQUAL "ON")
    message(FATAL_ERROR "EMBER_NCCL=ON, but nccl.h and libnccl were not found in the CUDA toolkit or NCCL_HOME")
  else()
    message(STATUS "Ember: NCCL off (nccl.h or libnccl not found; EMBER_NCCL=AUTO)")
  endif()
endif()
