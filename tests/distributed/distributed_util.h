// What the multi-process suites share: the devices every rank can run a
// collective on (the CPU; a GPU of each rank's own when this binary has
// NCCL), agreed on by all ranks so they run the same collectives.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <ember/ember.h>

namespace dist_test {

inline std::vector<ember::Device> devices() {
  using namespace ember;
  std::vector<Device> out{kCPU};
  const Device gpu(DeviceType::CUDA, distributed::local_rank());
  std::string why;
  bool mine = false;
  if (!distributed::nccl_available()) {
    why = "this binary has no NCCL (EMBER_NCCL with the CUDA backend)";
  } else {
    try {
      (void)empty({1}, TensorOptions(gpu));
      mine = true;
    } catch (const DeviceError& e) {
      why = e.what();
    }
  }
  Tensor all = scalar_tensor(mine ? 1.0 : 0.0, kInt64);
  distributed::all_reduce(all, distributed::ReduceOp::Min);
  if (all.item() == 1) {
    out.push_back(gpu);
  } else {
    MESSAGE("CUDA tensors through NCCL skipped: ",
            why.empty() ? std::string("another rank has no GPU of its own") : why);
  }
  return out;
}

}  // namespace dist_test
