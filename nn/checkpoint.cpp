// Module checkpoints through safetensors.
#include <ember/nn/checkpoint.h>

namespace ember::nn {

void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, module.state_dict(), metadata);
}

LoadResult load(Module& module, const std::string& path, bool strict) {
  const StateDict sd = load_safetensors(path);
  try {
    return module.load_state_dict(sd, strict);
  } catch (const ShapeError& e) {
    throw ShapeError("checkpoint '" + path + "': " + e.what());
  } catch (const ValueError& e) {
    throw ValueError("checkpoint '" + path + "': " + e.what());
  }
}

}  // namespace ember::nn
