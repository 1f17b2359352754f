// The tensor core: views share storage, layouts, factories, printing,
// broadcasting, promotion and the errors bad input gets.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <string>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

using test::contains;
using test::error_of;

TEST_CASE("tensor: views share storage and see writes") {
  Tensor a = arange(0, 12, 1, kFloat32).reshape({3, 4});
  CHECK(a.is_contiguous());
  Tensor t = a.t();
  CHECK(t.storage().get() == a.storage().get());
  CHECK(!t.is_contiguous());
  CHECK(t.at<float>({3, 1}) == 7.0f);
  Tensor row = a.select(0, 1);
  CHECK(row.to_vector<float>() == std::vector<float>{4, 5, 6, 7});
  Tensor col = a.slice(1, 1, 4, 2);  // columns 1 and 3
  CHECK(col.shape() == Shape{3, 2});
  CHECK(col.to_vector<float>() == std::vector<float>{1, 3, 5, 7, 9, 11});
  row.fill_(0.0);
  CHECK(a.at<float>({1, 2}) == 0.0f);
  CHECK(a.contiguous().storage().get() == a.storage().get());
  // reshape copies only when it must
  CHECK(a.reshape({4, 3}).storage().get() == a.storage().get());
  CHECK(t.reshape({12}).storage().get() != a.storage().get());
  CHECK(contains(error_of<ShapeError>([&] { t.view({12}); }), "view"));
  Tensor e = tensor({1, 2, 3}).unsqueeze(0).expand({2, 3});
  CHECK(e.stride(0) == 0);
  CHECK(e.to_vector<float>() == std::vector<float>{1, 2, 3, 1, 2, 3});
  CHECK(a.unsqueeze(1).shape() == Shape{3, 1, 4});
  CHECK(a.unsqueeze(1).squeeze().shape() == Shape{3, 4});
  CHECK(randn({2, 3, 4}).flatten(1).shape() == Shape{2, 12});
  CHECK(randn({2, 12}).unflatten(1, {3, -1}).shape() == Shape{2, 3, 4});
  CHECK(randn({2, 3, 4}).permute({2, 0, 1}).shape() == Shape{4, 2, 3});
}

TEST_CASE("tensor: multi-head split of a (5,10,256) tensor for 4 heads") {
  const Tensor X = arange(0, 5 * 10 * 256, 1, kFloat32).reshape({5, 10, 256});
  const Tensor H = X.reshape({5, 10, 4, 64}).permute({0, 2, 1, 3}).reshape({20, 10, 64});
  CHECK(H.shape() == Shape{20, 10, 64});
  for (int b : {0, 3, 4})
    for (int h : {0, 2, 3})
      for (int t : {0, 7})
        for (int j : {0, 33, 63}) CHECK(H.at<float>({b * 4 + h, t, j}) == X.at<float>({b, t, h * 64 + j}));
  const Tensor back = H.reshape({5, 4, 10, 64}).permute({0, 2, 1, 3}).reshape({5, 10, 256});
  CHECK(allclose(back, X, 0, 0));
}

TEST_CASE("tensor: out-of-range dims and indices throw IndexError naming the op") {
  Tensor a = zeros({2, 3});
  CHECK(contains(error_of<IndexError>([&] { a.transpose(0, 2); }), "transpose"));
  CHECK(contains(error_of<IndexError>([&] { a.select(1, 3); }), "select"));
  CHECK(contains(error_of<IndexError>([&] { sum(a, {-3}); }), "sum"));
  CHECK(contains(error_of<IndexError>([&] { a.at<float>({2, 0}); }), "out of range"));
  CHECK(contains(error_of<IndexError>([&] { a.narrow(1, 2, 2); }), "narrow"));
}

TEST_CASE("tensor: broadcasting and promotion follow PyTorch") {
  CHECK(add(zeros({3, 1}), zeros({4})).shape() == Shape{3, 4});
  const std::string msg = error_of<ShapeError>([] { add(zeros({2, 3}), zeros({4})); });
  CHECK(contains(msg, "add"));
  CHECK(contains(msg, "[2, 3]"));
  CHECK(contains(msg, "[4]"));
  CHECK(add(tensor({1, 2}, kInt64), tensor({0.5f, 0.5f})).dtype() == kFloat32);
  CHECK(mul(tensor({1, 2}), scalar_tensor(2.0, kFloat64)).dtype() == kFloat32);
  CHECK(mul(tensor({1, 2}), tensor({2.0, 3.0}, kFloat64)).dtype() == kFloat64);
  CHECK(gt(tensor({1, 3}), 2.0).dtype() == kBool);
  CHECK(contains(error_of<DTypeError>([] { matmul(zeros({2, 2}), zeros({2, 2}, kFloat64)); }), "float64"));
}

TEST_CASE("tensor: factories") {
  CHECK(arange(5).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(0, 1, 0.25, kFloat32).to_vector<float>() == std::vector<float>{0, 0.25f, 0.5f, 0.75f});
  const std::vector<double> l = linspace(0, 5, 50, kFloat64).to_vector<double>();
  CHECK(l.front() == 0.0);
  CHECK(l.back() == 5.0);
  CHECK(l[1] == doctest::Approx(5.0 / 49));
  CHECK(eye(3).at<float>({1, 1}) == 1.0f);
  CHECK(eye(3).at<float>({1, 2}) == 0.0f);
  CHECK(full({2}, 7.0, kInt64).to_vector<int64_t>() == std::vector<int64_t>{7, 7});
  manual_seed(42);
  const Tensor r1 = randn({5});
  manual_seed(42);
  CHECK(allclose(randn({5}), r1, 0, 0));
  Generator g(5);
  const Tensor n = randn({100000}, kFloat64, &g);
  CHECK(mean(n).item<double>() == doctest::Approx(0.0).epsilon(0).scale(1).epsilon(0.02));
  CHECK(sqrt(mean(square(sub(n, mean(n))))).item<double>() == doctest::Approx(1.0).epsilon(0.02));
  const std::vector<float> u = rand({10000}, kFloat32, &g).to_vector<float>();
  CHECK(*std::min_element(u.begin(), u.end()) >= 0.0f);
  CHECK(*std::max_element(u.begin(), u.end()) < 1.0f);
  const std::vector<int64_t> ri = randint(3, 7, {1000}, kInt64, &g).to_vector<int64_t>();
  CHECK(*std::min_element(ri.begin(), ri.end()) == 3);
  CHECK(*std::max_element(ri.begin(), ri.end()) == 6);
  std::vector<int64_t> p = randperm(50, &g).to_vector<int64_t>();
  std::sort(p.begin(), p.end());
  for (int64_t i = 0; i < 50; ++i) CHECK(p[i] == i);
}

TEST_CASE("tensor: printing like PyTorch") {
  const std::string s = tensor({{1.5, 2}, {3, 4}}).str();
  CHECK(s == "tensor([[1.5000, 2.0000],\n        [3.0000, 4.0000]], shape=[2, 2], dtype=float32, device=cpu)");
  CHECK(tensor({1, 2}, kInt64).str() == "tensor([1, 2], shape=[2], dtype=int64, device=cpu)");
  CHECK(contains(gt(tensor({1, 3}), 2.0).str(), "[False,  True]"));
  const std::string big = zeros({100, 100}).str();
  CHECK(contains(big, "..."));
  CHECK(contains(big, "shape=[100, 100]"));
  CHECK(big.size() < 1000);
  CHECK(contains(tensor({1.0}).requires_grad_().str(), "requires_grad=true"));
}

TEST_CASE("tensor: conversions and element access") {
  const Tensor f = tensor({1.7, -2.7});
  CHECK(f.to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, -2});
  // Outside int64's range, and NaN: the lowest int64 (x86's conversion, so
  // PyTorch's CPU cast), where C++ leaves the conversion undefined.
  const int64_t lowest = std::numeric_limits<int64_t>::min();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const DType dt : {kFloat32, kFloat64, kBFloat16})
    CHECK(tensor({0x1p62, -0x1p63, 0x1p63, 1e30, -1e30, nan}).to(dt).to(kInt64).to_vector<int64_t>() ==
          std::vector<int64_t>{int64_t(1) << 62, lowest, lowest, lowest, lowest, lowest});
  CHECK(f.to(kBool).to_vector<bool>() == std::vector<bool>{true, true});
  CHECK(tensor({3.0}).item<double>() == 3.0);
  CHECK(contains(error_of<ValueError>([&] { f.item(); }), "item"));
  CHECK(contains(error_of<DTypeError>([&] { f.data<double>(); }), "float32"));
  // cuda:7 exists nowhere (no backend, the emulator or a real GPU machine).
  CHECK(contains(error_of<DeviceError>([&] { f.to(Device("cuda:7")); }), "cuda"));
}
