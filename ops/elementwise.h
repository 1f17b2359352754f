/// \file
/// Elementwise arithmetic, math and comparison ops with NumPy broadcasting and
/// PyTorch's type promotion (int64 + float32 -> float32; a 0-dim tensor does
/// not promote a dimensioned one of the same kind). All are differentiable in
/// their floating inputs; comparisons return bool tensors.
#pragma once

#include <limits>

#include <ember/core/tensor.h>

namespace ember {

// ---- arithmetic -------------------------------------------------------------
/// Arithmetic, differentiable in floating inputs: a + b, a - b, a * b, a / b
/// (with a scalar on either side), -x, x^p, x^2, elementwise maximum/minimum
/// (NaN propagates) and clamp to [min, max].
///@{
Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, double b);
Tensor sub(double a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, double b);
Tensor div(double a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor pow(const Tensor& x, const Tensor& exponent);
Tensor square(const Tensor& x);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor clamp(const Tensor& x, double min = -std::numeric_limits<double>::infinity(),
             double max = std::numeric_limits<double>::infinity());
///@}

/// Rounding down and the remainders of division, as torch.floor,
/// torch.remainder (the result has the divisor's sign, Python's %) and
/// torch.fmod (the dividend's sign, C's fmod); the divisor a tensor
/// (broadcast) or a number. Integer inputs stay integers (a number with a
/// fraction makes them float32) and an integer divisor of 0 throws
/// ValueError. Gradients as PyTorch's: floor's is zero; for a = q b + r, the
/// dividend's is g and the divisor's -g q.
///@{
Tensor floor(const Tensor& x);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, double b);
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, double b);
///@}

// ---- math (integer inputs are computed in float32, as in PyTorch) -----------
/// exp, log, sqrt, 1/sqrt, |x|, sin and cos, elementwise and differentiable
/// (integer inputs are computed in float32, as in PyTorch).
///@{
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
///@}

// ---- selection --------------------------------------------------------------
/// cond ? a : b, broadcasting all three; cond must be bool.
///@{
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
///@}
/// x with value wherever mask (bool, broadcastable to x) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// ---- comparisons and logic (bool results, not differentiable) ---------------
/// a == b, a != b, a < b, a <= b, a > b, a >= b (against a tensor or a
/// scalar) and logical and/or/not: bool results, not differentiable.
///@{
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);
///@}
/// True where all elements of a and b are within atol + rtol * |b|.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
/// Same shape and every element equal (torch.equal); NaN equals nothing.
bool equal(const Tensor& a, const Tensor& b);

// ---- in place (not recorded by autograd: use under NoGradGuard or on
// tensors that do not require grad; bump the version counter) -------------
/// In place on self, returning it: self += alpha * other, -=, *=, /=, clamp
/// and masked_fill (other broadcast to self's shape). Not recorded by
/// autograd: use under NoGradGuard or on tensors that do not require grad;
/// each bumps the version counter.
///@{
Tensor& add_(Tensor& self, const Tensor& other, double alpha = 1.0);
Tensor& add_(Tensor& self, double other);
Tensor& sub_(Tensor& self, const Tensor& other);
Tensor& mul_(Tensor& self, const Tensor& other);
Tensor& mul_(Tensor& self, double other);
Tensor& div_(Tensor& self, const Tensor& other);
Tensor& div_(Tensor& self, double other);
Tensor& clamp_(Tensor& self, double min, double max);
Tensor& masked_fill_(Tensor& self, const Tensor& mask, double value);
///@}

// ---- operators --------------------------------------------------------------
/// The operators + - * / (tensor or scalar on either side), unary - and the
/// comparisons: the ops above.
///@{
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator-(double a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator/(double a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
inline Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }
inline Tensor& operator+=(Tensor& a, const Tensor& b) { return add_(a, b); }
inline Tensor& operator+=(Tensor& a, double b) { return add_(a, b); }
inline Tensor& operator-=(Tensor& a, const Tensor& b) { return sub_(a, b); }
inline Tensor& operator*=(Tensor& a, const Tensor& b) { return mul_(a, b); }
inline Tensor& operator*=(Tensor& a, double b) { return mul_(a, b); }
inline Tensor& operator/=(Tensor& a, const Tensor& b) { return div_(a, b); }
inline Tensor& operator/=(Tensor& a, double b) { return div_(a, b); }
///@}

}  // namespace ember
