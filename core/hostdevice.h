/// \file
/// EMBER_HD marks functions compiled for both host and CUDA device code.
#pragma once

#if defined(__CUDACC__)
#define EMBER_HD __host__ __device__
#else
#define EMBER_HD
#endif
