/// \file
/// Tensor factories: constants, ranges, identity and random tensors. Random
/// ones draw from the default generator (manual_seed) unless given one.
#pragma once

#include <ember/core/random.h>
#include <ember/core/tensor.h>

namespace ember {

/// Tensors of zeros, ones, or value (float32 on the CPU unless opts says otherwise), and the same with
/// the shape, dtype and device of t.
///@{
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
///@}
/// [start, end) in steps (int64 unless opts gives a floating dtype).
///@{
Tensor arange(double end, TensorOptions opts = TensorOptions(DType::Int64));
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = TensorOptions(DType::Int64));
///@}
/// steps values evenly spaced from start to end inclusive.
///@{
Tensor linspace(double start, double end, int64_t steps, TensorOptions opts = {});
Tensor eye(int64_t n, TensorOptions opts = {});
Tensor eye(int64_t n, int64_t m, TensorOptions opts = {});
///@}
/// Uniform in [0, 1), standard normal, uniform in [low, high) (floating), and
/// integers in [low, high).
///@{
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor uniform(const Shape& shape, double low, double high, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor normal(const Shape& shape, double mean, double std, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = TensorOptions(DType::Int64),
               Generator* gen = nullptr);
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);
///@}
/// A random permutation of 0..n-1 (int64).
Tensor randperm(int64_t n, Generator* gen = nullptr);

/// In place: fill with uniform [low, high) or normal(mean, std) values.
///@{
Tensor& uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean, double std, Generator* gen = nullptr);
///@}

}  // namespace ember
