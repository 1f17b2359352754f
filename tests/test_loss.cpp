// Known answers and error messages for the losses (ops/loss.h). Expected
// values come from PyTorch 1.13 in float64: tools/reference_loss.py prints
// every one of them (same inputs, same backward seed w = 1, 2, 3, ... / 10).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::check_values;
using test::contains;
using test::error_of;
using test::weighted_backward;

namespace {

Tensor logits_4x5() {
  return tensor({{0.5, -1.0, 2.0, 0.0, 1.5},
                 {1.0, 1.0, -2.0, 0.5, 0.0},
                 {-0.5, 2.5, 0.0, 1.0, -1.5},
                 {3.0, -0.5, 0.5, -1.0, 2.0}},
                TensorOptions(kFloat64));
}

Tensor ints(const std::vector<int64_t>& v, const Shape& shape) { return from_vector(v, shape); }

}  // namespace

TEST_CASE("cross_entropy: known answers for none / sum / mean") {
  const Tensor target = ints({1, 0, 4, 2}, {4});
  struct Case {
    Reduction r;
    std::vector<double> loss, grad;
  };
  const std::vector<Case> cases = {
      {Reduction::None,
       {3.700511582395443, 1.1066456576639652, 4.317229612029606, 2.9044495673587676},
       {0.0110746487914194,   -0.09752891184158298, 0.04963313244633698,   0.006717114037545328, 0.03010401656628128,
        -0.1338667458479661,  0.0661332541520339,   0.0032925808458566332, 0.04011184626977638,  0.024329064580299195,
        0.010875938396948354, 0.21844906224622068,  0.017931390973873005,  0.048742574243273544, -0.2959989658603156,
        0.2669376150894684,   0.00806081751269595,  -0.37808842623271416,  0.004889132963798623, 0.0982008606667512}},
      {Reduction::Sum,
       {12.028836419447781},
       {0.0110746487914194,    -0.09752891184158298, 0.04963313244633698,   0.006717114037545328,
        0.03010401656628128,   -0.06693337292398305, 0.03306662707601695,   0.0016462904229283166,
        0.02005592313488819,   0.012164532290149598, 0.0036253127989827848, 0.07281635408207357,
        0.005977130324624335,  0.01624752474775785,  -0.09866632195343854,  0.0667344037723671,
        0.0020152043781739874, -0.09452210655817854, 0.0012222832409496559, 0.0245502151666878}},
      {Reduction::Mean,
       {3.0072091048619454},
       {0.00276866219785485,   -0.024382227960395745, 0.012408283111584244,   0.001679278509386332,
        0.00752600414157032,   -0.016733343230995762, 0.008266656769004238,   0.00041157260573207916,
        0.005013980783722048,  0.0030411330725373994, 0.0009063281997456962,  0.018204088520518392,
        0.0014942825811560837, 0.004061881186939463,  -0.024666580488359634,  0.016683600943091775,
        0.0005038010945434968, -0.023630526639544635, 0.00030557081023741396, 0.00613755379167195}},
  };
  for (const Case& c : cases) {
    Tensor x = logits_4x5().requires_grad_();
    Tensor out = cross_entropy(x, target, c.r);
    CHECK(out.shape() == (c.r == Reduction::None ? Shape{4} : Shape{}));
    check_values(out, c.loss);
    weighted_backward(out);
    check_values(x.grad(), c.grad);
  }
}

TEST_CASE("cross_entropy: label smoothing 0.1 with an ignored target") {
  const Tensor target = ints({1, -100, 4, 2}, {4});
  struct Case {
    Reduction r;
    std::vector<double> loss, grad;
  };
  const std::vector<Case> cases = {
      {Reduction::None,
       {3.5405115823954434, 0.0, 4.137229612029606, 2.8744495673587678},
       {0.009074648791419402,
        -0.08952891184158299,
        0.04763313244633698,
        0.0047171140375453285,
        0.028104016566281285,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.004875938396948356,
        0.21244906224622073,
        0.011931390973873008,
        0.04274257424327355,
        -0.27199896586031563,
        0.2589376150894684,
        6.0817512695950274e-05,
        -0.3460884262327142,
        -0.0031108670362013763,
        0.0902008606667512}},
      {Reduction::Sum,
       {10.552190761783818},
       {0.009074648791419402,
        -0.08952891184158299,
        0.04763313244633698,
        0.0047171140375453285,
        0.028104016566281285,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0016253127989827854,
        0.07081635408207358,
        0.003977130324624336,
        0.014247524747757853,
        -0.09066632195343854,
        0.0647344037723671,
        1.5204378173987568e-05,
        -0.08652210655817855,
        -0.0007777167590503441,
        0.0225502151666878}},
      {Reduction::Mean,
       {3.5173969205946056},
       {0.003024882930473134,
        -0.029842970613860993,
        0.015877710815445662,
        0.0015723713458484427,
        0.009368005522093761,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.000541770932994262,
        0.0236054513606912,
        0.0013257101082081125,
        0.004749174915919285,
        -0.030222107317812847,
        0.021578134590789035,
        5.068126057995892e-06,
        -0.028840702186059514,
        -0.00025923891968344796,
        0.007516738388895934}},
  };
  for (const Case& c : cases) {
    Tensor x = logits_4x5().requires_grad_();
    Tensor out = cross_entropy(x, target, c.r, -100, 0.1);
    check_values(out, c.loss);
    weighted_backward(out);
    check_values(x.grad(), c.grad);
  }
}

TEST_CASE("cross_entropy: ignore_index naming a real class") {
  Tensor x = logits_4x5().requires_grad_();
  Tensor out = cross_entropy(x, ints({1, 0, 4, 2}, {4}), Reduction::Mean, /*ignore_index=*/2);
  check_values(out, {3.0414622840296714});
  out.backward();
  check_values(x.grad(), {0.036915495971397996,
                          -0.3250963728052766,
                          0.16544377482112324,
                          0.02239038012515109,
                          0.10034672188760425,
                          -0.22311124307994348,
                          0.11022209025338983,
                          0.005487634743094388,
                          0.06685307711629396,
                          0.040548440967165325,
                          0.012084375996609283,
                          0.24272118027357853,
                          0.01992376774874778,
                          0.05415841582585949,
                          -0.3288877398447951,
                          0.0,
                          0.0,
                          0.0,
                          0.0,
                          0.0});
}

TEST_CASE("cross_entropy: (N, C, L) logits with smoothing 0.2 and an ignored target") {
  // logits3 = sin(0.37 * arange(24)) * 2 reshaped to (2, 3, 4), as in the script.
  const Tensor base = mul(sin(mul(arange(0, 24, 1, TensorOptions(kFloat64)), 0.37)), 2.0).reshape({2, 3, 4});
  const Tensor target = ints({0, 2, 1, -100, 2, 2, 0, 1}, {2, 4});
  {
    Tensor x = base.clone().requires_grad_();
    Tensor out = cross_entropy(x, target, Reduction::None, -100, 0.2);
    CHECK(out.shape() == Shape{2, 4});
    check_values(out,
                 {2.1217845159794755, 2.408669810032211, 0.8102363460020682, 0.0, 0.5158121479670899, 0.543161052841894,
                  3.5749840626648823, 1.0068435445710837},
                 1e-11);
    weighted_backward(out);
    check_values(x.grad(), {-0.07642440915929764,  0.029663956472163293,  0.10674132909257929,   0.0,
                            0.06839302936992984,   0.12932558974449543,   -0.09814459874087493,  0.0,
                            0.008031379789367797,  -0.1589895462166587,   -0.008596730351704277, 0.0,
                            -0.02241374808533246,  -0.030341343337402994, -0.5937168860750597,   -0.030104319433026452,
                            0.0034966666429752935, 0.03166220691278691,   0.1144768257456925,    -0.3486965311125022,
                            0.018917081442357153,  -0.001320863575383943, 0.4792400603293671,    0.37880085054552876},
                 1e-11);
  }
  {
    Tensor x = base.clone().requires_grad_();
    Tensor out = cross_entropy(x, target, Reduction::Mean, -100, 0.2);
    check_values(out, {1.5687844971512437}, 1e-11);
    weighted_backward(out);
    check_values(x.grad(),
                 {-0.01091777273704252,   0.0021188540337259494,  0.0050829204329799664, 0.0,
                  0.009770432767132835,   0.009237542124606816,   -0.004673552320994046, 0.0,
                  0.0011473399699096852,  -0.011356396158332763,  -0.000409368111985918, 0.0,
                  -0.0006403928024380704, -0.0007224129366048332, -0.012116671144388977, -0.0005375771327326153,
                  9.990476122786562e-05,  0.0007538620693520696,  0.002336261749912093,  -0.006226723769866111,
                  0.0005404880412102054,  -3.14491327472354e-05,  0.009780409394476884,  0.006764300902598728},
                 1e-11);
  }
}

TEST_CASE("cross_entropy: 1-D logits with a 0-dim target") {
  Tensor x = tensor({0.2, -0.3, 1.1}, TensorOptions(kFloat64)).requires_grad_();
  Tensor out = cross_entropy(x, from_vector<int64_t>({2}, Shape{}));
  CHECK(out.dim() == 0);
  check_values(out, {0.5026926145345143});
  out.backward();
  check_values(x.grad(), {0.2459338665058577, 0.1491664302974766, -0.39510029680333436});
}

TEST_CASE("cross_entropy: float32 stays finite for large logits") {
  Tensor x = tensor({{1000.0, 0.0, -1000.0}, {50.0, 51.0, 52.0}});
  Tensor out = cross_entropy(x, ints({2, 0}, {2}), Reduction::None);
  CHECK(out.dtype() == kFloat32);
  check_values(out, {2000.0, 2.4076058864593506}, 1e-6);
}

TEST_CASE("cross_entropy: mean over only ignored targets is NaN, gradient zero") {
  Tensor x = logits_4x5().requires_grad_();
  Tensor out = cross_entropy(x, ints({-100, -100, -100, -100}, {4}), Reduction::Mean, -100, 0.1);
  CHECK(std::isnan(out.item<double>()));
  out.backward();
  for (double g : x.grad().to_vector<double>()) CHECK(g == 0.0);
  CHECK(cross_entropy(logits_4x5(), ints({-100, -100, -100, -100}, {4}), Reduction::Sum).item<double>() == 0.0);
}

TEST_CASE("cross_entropy: non-contiguous logits give the contiguous answer") {
  const Tensor target = ints({1, 0, 4, 2}, {4});
  Tensor xt = logits_4x5().t().contiguous().t();  // same values, column-major
  REQUIRE(!xt.is_contiguous());
  check_values(cross_entropy(xt, target, Reduction::Sum, -100, 0.1),
               {cross_entropy(logits_4x5(), target, Reduction::Sum, -100, 0.1).item<double>()});
}

TEST_CASE("nll_loss: known answers for none / sum / mean with an ignored target") {
  const Tensor target = ints({0, 2, -100}, {3});
  struct Case {
    Reduction r;
    std::vector<double> loss, grad;
  };
  const std::vector<Case> cases = {
      {Reduction::None, {0.2, 2.2, 0.0}, {-0.1, 0.0, 0.0, 0.0, 0.0, -0.2, 0.0, 0.0, 0.0}},
      {Reduction::Sum, {2.4000000000000004}, {-0.1, 0.0, 0.0, 0.0, 0.0, -0.1, 0.0, 0.0, 0.0}},
      {Reduction::Mean, {1.2000000000000002}, {-0.05, 0.0, 0.0, 0.0, 0.0, -0.05, 0.0, 0.0, 0.0}},
  };
  for (const Case& c : cases) {
    Tensor x =
        tensor({{-0.2, -1.9, -3.0}, {-1.2, -0.4, -2.2}, {-2.5, -0.9, -0.7}}, TensorOptions(kFloat64)).requires_grad_();
    Tensor out = nll_loss(x, target, c.r);
    check_values(out, c.loss);
    weighted_backward(out);
    check_values(x.grad(), c.grad);
  }
  CHECK(std::isnan(nll_loss(tensor({{-1.0, -2.0}}), ints({-100}, {1})).item<double>()));
}

TEST_CASE("mse_loss: known answers for none / sum / mean") {
  const Tensor b = tensor({{1.0, 1.0, 1.5}, {-0.5, 0.25, 0.0}}, TensorOptions(kFloat64));
  struct Case {
    Reduction r;
    std::vector<double> loss, grad;
  };
  const std::vector<Case> cases = {
      {Reduction::None, {0.25, 4.0, 0.25, 4.0, 0.0625, 0.0625}, {-0.1, -0.8, 0.3, 1.6, -0.25, -0.3}},
      {Reduction::Sum, {8.625}, {-0.1, -0.4, 0.1, 0.4, -0.05, -0.05}},
      {Reduction::Mean,
       {1.4375},
       {-0.016666666666666666, -0.06666666666666667, 0.016666666666666666, 0.06666666666666667, -0.008333333333333333,
        -0.008333333333333333}},
  };
  for (const Case& c : cases) {
    Tensor x = tensor({{0.5, -1.0, 2.0}, {1.5, 0.0, -0.25}}, TensorOptions(kFloat64)).requires_grad_();
    Tensor out = mse_loss(x, b, c.r);
    check_values(out, c.loss);
    weighted_backward(out);
    check_values(x.grad(), c.grad);
  }
}

TEST_CASE("binary_cross_entropy_with_logits: known answers, finite at |x| = 100") {
  const std::vector<double> xs = {-100.0, -3.0, -0.5, 0.0, 0.5, 3.0, 100.0};
  const std::vector<double> ts = {1.0, 1.0, 0.3, 1.0, 0.0, 1.0, 0.0};
  struct Case {
    Reduction r;
    std::vector<double> loss, gx, gt;
  };
  const std::vector<Case> cases = {
      {Reduction::None,
       {100.0, 3.048587351573742, 0.6240769841801067, 0.6931471805599453, 0.9740769841801067, 0.048587351573741965,
        100.0},
       {-0.1, -0.19051482536448666, 0.023262200639443623, -0.2, 0.3112296656009273, -0.02845552390653998, 0.7},
       {10.0, 0.6000000000000001, 0.15, -0.0, -0.25, -1.7999999999999998, -70.0}},
      {Reduction::Sum,
       {205.38847585206764},
       {-0.1, -0.09525741268224333, 0.007754066879814542, -0.05, 0.06224593312018546, -0.004742587317756664, 0.1},
       {10.0, 0.30000000000000004, 0.05, -0.0, -0.05, -0.30000000000000004, -10.0}},
      {Reduction::Mean,
       {29.34121083600966},
       {-0.014285714285714287, -0.013608201811749047, 0.001107723839973506, -0.0071428571428571435,
        0.008892276160026495, -0.0006775124739652377, 0.014285714285714287},
       {1.4285714285714286, 0.042857142857142864, 0.0071428571428571435, -0.0, -0.0071428571428571435,
        -0.042857142857142864, -1.4285714285714286}},
  };
  for (const Case& c : cases) {
    Tensor x = from_vector(xs).requires_grad_();
    Tensor t = from_vector(ts).requires_grad_();
    Tensor out = binary_cross_entropy_with_logits(x, t, c.r);
    check_values(out, c.loss);
    weighted_backward(out);
    check_values(x.grad(), c.gx);
    check_values(t.grad(), c.gt);
  }
  // float32 at |x| = 100: exact, no inf or NaN (with pos_weight too).
  Tensor out32 =
      binary_cross_entropy_with_logits(tensor({{-100.0, 100.0}}), tensor({{1.0, 0.0}}), Reduction::None, tensor({2.0}));
  check_values(out32, {200.0, 100.0}, 1e-7);
}

TEST_CASE("binary_cross_entropy_with_logits: pos_weight broadcast over the last dim") {
  Tensor x = tensor({{0.3, -1.2, 2.0}, {-0.7, 0.0, 1.5}}, TensorOptions(kFloat64)).requires_grad_();
  Tensor t = tensor({{1.0, 0.0, 0.5}, {0.0, 1.0, 1.0}}, TensorOptions(kFloat64)).requires_grad_();
  Tensor pw = tensor({2.0, 0.5, 3.0}, TensorOptions(kFloat64)).requires_grad_();
  Tensor out = binary_cross_entropy_with_logits(x, t, Reduction::None, pw);
  check_values(out, {1.108710488937054, 0.2632824673380314, 1.2538560220859452, 0.40318604888545795,
                     0.34657359027997264, 0.6042398339482574});
  weighted_backward(out);
  check_values(x.grad(), {-0.0851114966376682, 0.04629504330019648, 0.07847824678672939, 0.13272489113273356, -0.125,
                          -0.32836594285144144});
  check_values(t.grad(), {0.02543552444685271, 0.09367175326619687, -0.5238431933742165, 0.7212744195541831,
                          -0.17328679513998632, -0.658304066420697});
  check_values(pw.grad(), {0.055435524446852714, 0.34657359027997264, 0.1398871684460973});
}

TEST_CASE("losses: error messages name the op and the shapes") {
  const Tensor logits = zeros({4, 5});
  // Batch mismatch.
  std::string m = error_of<ShapeError>([&] { cross_entropy(logits, ints({0, 1, 2}, {3})); });
  CHECK(contains(m, "cross_entropy"));
  CHECK(contains(m, "[4, 5]"));
  CHECK(contains(m, "[3]"));
  // Spatial mismatch for (N, C, L).
  m = error_of<ShapeError>([&] { cross_entropy(zeros({2, 3, 4}), ints({0, 0, 0, 0, 0, 0}, {2, 3})); });
  CHECK(contains(m, "[2, 3, 4]"));
  CHECK(contains(m, "expected target shape [2, 4]"));
  // Class index out of range, and negative but not ignore_index.
  m = error_of<IndexError>([&] { cross_entropy(logits, ints({0, 5, 1, 2}, {4})); });
  CHECK(contains(m, "cross_entropy: target 5 is out of range for 5 classes"));
  CHECK(contains(m, "[4, 5]"));
  CHECK(contains(m, "[4]"));
  m = error_of<IndexError>([&] { cross_entropy(logits, ints({0, -1, 1, 2}, {4})); });
  CHECK(contains(m, "target -1"));
  m = error_of<IndexError>([&] { nll_loss(logits, ints({0, 1, 7, 2}, {4})); });
  CHECK(contains(m, "nll_loss: target 7"));
  // Float targets.
  m = error_of<DTypeError>([&] { cross_entropy(logits, zeros({4})); });
  CHECK(contains(m, "cross_entropy"));
  CHECK(contains(m, "float32"));
  CHECK(contains(m, "[4, 5]"));
  CHECK_THROWS_AS(cross_entropy(zeros({4, 5}, TensorOptions(kInt64)), ints({0, 1, 2, 3}, {4})), DTypeError);
  CHECK_THROWS_AS(cross_entropy(logits, ints({0, 1, 2, 3}, {4}), Reduction::Mean, -100, 1.5), ValueError);
  m = error_of<ShapeError>([&] { mse_loss(zeros({4, 1}), zeros({4})); });
  CHECK(contains(m, "mse_loss"));
  CHECK(contains(m, "[4, 1]"));
  CHECK(contains(m, "[4]"));
  m = error_of<ShapeError>([&] { binary_cross_entropy_with_logits(zeros({2, 3}), zeros({3, 2})); });
  CHECK(contains(m, "binary_cross_entropy_with_logits"));
  CHECK(contains(m, "[2, 3]"));
  CHECK(contains(m, "[3, 2]"));
  CHECK_THROWS_AS(binary_cross_entropy_with_logits(zeros({2, 3}), zeros({2, 3}), Reduction::Mean, ones({2})),
                  ShapeError);
}

TEST_CASE("cross_entropy: large batch on the thread pool matches the composite formula") {
  // loss_r = lse_r - (1 - eps) x[r, t_r] - eps / C sum_c x[r, c], written with
  // elementwise ops, sum and gather (inputs are small, so exp needs no shift).
  const int64_t N = 3000, C = 37;
  const double eps = 0.1;
  Generator gen(11);
  const Tensor base = randn({N, C}, TensorOptions(kFloat64), &gen);
  std::vector<int64_t> tv = randint(0, C, {N}, TensorOptions(kInt64), &gen).to_vector<int64_t>();
  for (size_t i = 0; i < tv.size(); i += 7) tv[i] = -100;
  const Tensor target = from_vector(tv, Shape{N});
  const int saved = num_threads();
  set_num_threads(4);
  Tensor x = base.clone().requires_grad_();
  Tensor fused = cross_entropy(x, target, Reduction::Mean, -100, eps);
  fused.backward();
  set_num_threads(saved);

  Tensor y = base.clone().requires_grad_();
  const Tensor keep = ne(target, -100.0);
  const Tensor safe_t = where(keep, target, 0.0).to(kInt64).reshape({N, 1});
  Tensor lse = log(sum(exp(y), {1}));
  Tensor per_row = sub(sub(lse, mul(gather(y, 1, safe_t).reshape({N}), 1 - eps)), mul(sum(y, {1}), eps / C));
  Tensor composite = div(sum(where(keep, per_row, 0.0)), sum(keep.to(kFloat64)));
  composite.backward();
  CHECK(fused.item<double>() == doctest::Approx(composite.item<double>()).epsilon(1e-12));
  CHECK(allclose(x.grad(), y.grad(), 1e-10, 1e-14));
}
