// The CUDA kernels of tests/user_functor.h's functors: including the header
// in a CUDA source is the whole registration (ops/pointwise_register.h).
#include "../user_functor.h"
