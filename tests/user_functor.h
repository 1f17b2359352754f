// A pointwise op written from outside Ember's ops, with the public
// registration (ops/pointwise_register.h): swish(x; beta) = x sigmoid(beta x)
// and its backward, each a functor registered by one line that both
// test_user_functor.cpp (the CPU kernels) and cuda/user_functor.cu (the CUDA
// kernels, on the emulator) include.
#pragma once

#include <ember/ops/functors.h>
#include <ember/ops/pointwise_register.h>

namespace user_functor {

// y = x / (1 + exp(-beta x)), beta in a.
struct Swish {
  EMBER_FUNCTOR_MEMBERS("test_swish", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return x / (T(1) + ember::fn::hd::exp(-T(a) * x));
  }
};

// dx = g * dy/dx, with s = sigmoid(beta x): y = x s, so
// dy/dx = s + x * ds/dx = s + beta x s (1 - s).
struct SwishBackward {
  EMBER_FUNCTOR_MEMBERS("test_swish_backward", false)
  template <class T>
  EMBER_HD T operator()(T g, T x) const {
    const T s = T(1) / (T(1) + ember::fn::hd::exp(-T(a) * x));
    return g * (s + T(a) * x * s * (T(1) - s));
  }
};

EMBER_REGISTER_UNARY_FUNCTOR(Swish);
EMBER_REGISTER_BINARY_FUNCTOR(SwishBackward);

}  // namespace user_functor
