// Runs every row of the op conformance table (see conformance.h).
#include <doctest/doctest.h>

#include "conformance.h"

#include <ember/ops/copy.h>

using namespace ember;

namespace conformance {

std::vector<OpCase>& registry() {
  static std::vector<OpCase> rows;
  return rows;
}

namespace {

// Inputs for a row, deterministic per (row, input), in dtype dt. With
// strided = true each floating tensor is a non-contiguous view: a transpose
// of a buffer laid out the other way (2-D and up) or every other element of
// a longer buffer (1-D).
In make_inputs(const OpCase& c, DType dt, bool strided, Device device = kCPU) {
  In xs;
  uint64_t seed = 17;
  for (char ch : c.name) seed = seed * 31 + static_cast<uint64_t>(ch);
  for (const InputSpec& s : c.inputs) {
    Generator gen(seed++);
    Tensor t;
    switch (s.kind) {
      case InputSpec::Float: t = uniform(s.shape, -2.0, 2.0, TensorOptions(DType::Float64), &gen); break;
      case InputSpec::Positive: t = uniform(s.shape, 0.5, 2.0, TensorOptions(DType::Float64), &gen); break;
      case InputSpec::Int: t = randint(s.low, s.high, s.shape, TensorOptions(DType::Int64), &gen); break;
      case InputSpec::Bool: t = gt(rand(s.shape, TensorOptions(DType::Float64), &gen), 0.5); break;
    }
    const bool floating = s.kind == InputSpec::Float || s.kind == InputSpec::Positive;
    if (floating) t = t.to(dt);
    t = t.to(device);  // the same values on every device; views are made there
    if (strided && floating && t.numel() > 1) {
      Tensor view;
      if (t.dim() >= 2) {
        Tensor buf = empty(t.transpose(-1, -2).shape(), TensorOptions(dt, device));
        buf.copy_(t.transpose(-1, -2));
        view = buf.transpose(-1, -2);  // same values, transposed strides
      }
      if (!view.defined() || view.is_contiguous()) {
        // Every other element of a buffer twice as long in the first dim > 1.
        int k = 0;
        while (t.shape()[k] == 1) ++k;
        Shape bs = t.shape();
        bs[k] *= 2;
        Tensor buf = zeros(bs, TensorOptions(dt, device));
        view = buf.slice(k, 0, bs[k], 2);
        view.copy_(t);
      }
      t = view;
      REQUIRE(!t.is_contiguous());
    }
    // Leaves: a fresh handle so requires_grad_ applies to this view only.
    t = t.detach();
    if (floating && s.grad && c.differentiable) t.requires_grad_();
    xs.push_back(t);
  }
  return xs;
}

void run_gradcheck(const OpCase& c, bool strided) {
  In xs = make_inputs(c, DType::Float64, strided);
  GradcheckResult r = gradcheck(c.fn, xs);
  const std::string where = c.name + (strided ? " (non-contiguous inputs)" : " (contiguous inputs)");
  INFO(where);
  CHECK_MESSAGE(r.ok, r.message);
}

}  // namespace

TEST_CASE("conformance: every op has a row") { CHECK(registry().size() > 0); }

TEST_CASE("conformance: float64 gradcheck, contiguous and non-contiguous") {
  for (const OpCase& c : registry()) {
    if (!c.differentiable) continue;
    SUBCASE(c.name.c_str()) {
      run_gradcheck(c, false);
      run_gradcheck(c, true);
    }
  }
}

TEST_CASE("conformance: strided inputs give the contiguous result") {
  for (const OpCase& c : registry()) {
    SUBCASE(c.name.c_str()) {
      NoGradGuard no_grad;
      const Tensor a = c.fn(make_inputs(c, DType::Float32, false));
      const Tensor b = c.fn(make_inputs(c, DType::Float32, true));
      CHECK(a.shape() == b.shape());
      CHECK_MESSAGE(allclose(b, a, c.fwd_rtol, 1e-6), c.name);
    }
  }
}

// The 16-bit tolerance: a few units in the last place of the dtype's
// 8 (bfloat16) or 11 (float16) significant bits, relative, plus an absolute
// floor for results that cancel to near zero.
void half_tol(DType dt, double& rtol, double& atol) {
  rtol = dt == DType::BFloat16 ? 1.0 / 64 : 1.0 / 512;
  atol = dt == DType::BFloat16 ? 2e-2 : 3e-3;
}

TEST_CASE("conformance: bfloat16 and float16 within their tolerance of float32") {
  int ran = 0, skipped = 0;
  for (const OpCase& c : registry()) {
    if (!c.half_skip.empty()) {
      ++skipped;
      continue;
    }
    for (const DType dt : {DType::BFloat16, DType::Float16}) {
      // No SUBCASE: one pass over the table, every failure reported (an
      // exception is one failed check naming the row).
      try {
        In in16 = make_inputs(c, dt, false);
        In in32;
        for (const Tensor& t : in16) {
          Tensor u = is_half(t.dtype()) ? t.detach().to(DType::Float32) : t;
          if (t.requires_grad()) u.requires_grad_();
          in32.push_back(u);
        }
        const Tensor a = c.fn(in32), b = c.fn(in16);
        if (a.dtype() == DType::Float32) CHECK_MESSAGE(b.dtype() == dt, c.name, " returned ", dtype_name(b.dtype()));
        double rtol, atol;
        half_tol(dt, rtol, atol);
        rtol *= c.half_tol_scale;
        atol *= c.half_tol_scale;
        CHECK_MESSAGE(allclose(b.to(DType::Float32), a, rtol, atol), c.name, " forward in ", dtype_name(dt), ": max |diff| ",
                      max(abs(sub(b.to(DType::Float32), a))).item<double>());
        if (c.differentiable && a.requires_grad()) {
          const Tensor w16 = rand(a.shape()).to(dt), w32 = w16.to(DType::Float32);
          sum(mul(a, w32)).backward();
          sum(mul(b, w16)).backward();
          for (size_t i = 0; i < in16.size(); ++i) {
            if (!in16[i].requires_grad()) continue;
            const Tensor g16 = in16[i].grad(), g32 = in32[i].grad();
            REQUIRE(g16.defined());
            CHECK_MESSAGE(g16.dtype() == dt, c.name, " grad of input ", i, " is ", dtype_name(g16.dtype()));
            CHECK_MESSAGE(allclose(g16.to(DType::Float32), g32, 2 * rtol, 2 * atol), c.name, " grad of input ", i,
                          " in ", dtype_name(dt), ": max |diff| ",
                          max(abs(sub(g16.to(DType::Float32), g32))).item<double>());
          }
        }
        ++ran;
      } catch (const std::exception& e) {
        FAIL_CHECK(c.name, " in ", std::string(dtype_name(dt)), " threw: ", std::string(e.what()));
      }
    }
  }
  MESSAGE(ran, " row/dtype cases run; ", skipped, " rows opt out (half_skip)");
}

// Backends other than the CPU, compared against it: "cuda" when a CUDA
// backend (real or emulated) is linked and usable.
std::vector<Device> other_backends();

TEST_CASE("conformance: every backend matches the CPU") {
  const std::vector<Device> devices = other_backends();
  if (devices.empty()) {
    MESSAGE("no usable backend besides the CPU; nothing to compare");
    return;
  }
  for (const OpCase& c : registry()) {
    for (const Device& d : devices) {
      for (const bool strided : {false, true}) {
        // A lambda, so a skipped op can return from it (not from the test).
        SUBCASE((c.name + " on " + d.str() + (strided ? ", non-contiguous inputs" : "")).c_str()) [&] {
          // The CPU reference on contiguous inputs; the device gets the same
          // values, contiguous or as strided views made on the device.
          In cpu_in = make_inputs(c, DType::Float32, false);
          In dev_in = make_inputs(c, DType::Float32, strided, d);
          Tensor a = c.fn(cpu_in), b;
          // An op whose kernels this backend lacks is listed, not failed: the
          // table names the missing kernel (the backend's to-do list).
          try {
            b = c.fn(dev_in);
          } catch (const DeviceError& e) {
            if (std::string(e.what()).find("no kernel for device") == std::string::npos) throw;
            MESSAGE("not on ", d.str(), " yet: ", c.name, " (", std::string(e.what()), ")");
            return;
          }
          CHECK_MESSAGE(allclose(b.cpu(), a, c.fwd_rtol, 1e-5), c.name, " forward on ", d.str());
          if (c.differentiable && a.requires_grad()) {
            Tensor w = rand(a.shape());
            sum(mul(a, w)).backward();
            try {
              sum(mul(b, w.to(d))).backward();
            } catch (const DeviceError& e) {
              if (std::string(e.what()).find("no kernel for device") == std::string::npos) throw;
              MESSAGE("backward not on ", d.str(), " yet: ", c.name, " (", std::string(e.what()), ")");
              return;
            }
            for (size_t i = 0; i < cpu_in.size(); ++i)
              if (cpu_in[i].requires_grad())
                CHECK_MESSAGE(allclose(dev_in[i].grad().cpu(), cpu_in[i].grad(), c.bwd_rtol, 1e-5), c.name,
                              " grad of input ", i, " on ", d.str());
          }
        }();
      }
    }
  }
}

// "cuda" when a CUDA backend is linked and a device (or the emulator) is
// there; a real build on a machine without a GPU skips with a message.
std::vector<Device> other_backends() {
  if (!cross_device_copy_kernel.has(DeviceType::CUDA)) return {};
  try {
    (void)empty({1}, TensorOptions(Device("cuda")));
  } catch (const DeviceError& e) {
    MESSAGE("CUDA backend built, but skipped: ", std::string(e.what()));
    return {};
  }
  return {Device("cuda")};
}

}  // namespace conformance
