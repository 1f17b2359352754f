// The demos' --precision flag and mixed-precision training step (precision.h).
#include "precision.h"

namespace ember::app {

CLI::Option* add_precision(CLI::App& cli, std::string& precision) {
  return cli
      .add_option("--precision", precision,
                  "fp32 (default), bf16 or fp16: forward and loss in an autocast region with float32 master weights "
                  "(fp16 adds dynamic loss scaling; on a CPU fp16 runs through float32 and is slower than fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
}

namespace {
optim::GradScalerOptions scaler_options(bool fp16) {
  optim::GradScalerOptions o;
  o.enabled = fp16;
  return o;
}
}  // namespace

MixedPrecision::MixedPrecision(const std::string& precision, DeviceType device)
    : name_(precision), device_(device), scaler_(scaler_options(precision == "fp16")) {
  EMBER_CHECK(precision == "fp32" || precision == "bf16" || precision == "fp16", ValueError,
              "precision must be fp32, bf16 or fp16, got '", precision, "'");
  low_ = precision != "fp32";
  dtype_ = precision == "fp16" ? kFloat16 : kBFloat16;
}

bool MixedPrecision::backward_step(const Tensor& loss, optim::Optimizer& opt, const std::vector<Tensor>& params,
                                   double max_norm) {
  scaler_.scale(loss).backward();
  if (max_norm > 0) {
    scaler_.unscale_(opt);  // clip the true gradients, not the scaled ones
    optim::clip_grad_norm_(params, max_norm);
  }
  const bool stepped = scaler_.step(opt);
  scaler_.update();
  return stepped;
}

}  // namespace ember::app
