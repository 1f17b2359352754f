#include <doctest/doctest.h>
#include <ember/ember.h>
using namespace ember;
TEST_CASE("smoke") {
  Tensor a = tensor({{1, 2}, {3, 4}});
  Tensor b = tensor({10, 20});
  Tensor c = a + b;
  CHECK(c.at<float>({1, 1}) == 24.0f);
  a.requires_grad_();
  Tensor l = sum(a * a);
  l.backward();
  CHECK(a.grad().at<float>({1, 0}) == 6.0f);
}
