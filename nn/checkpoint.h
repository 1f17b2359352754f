/// \file
/// Saving and loading a module's state dict as safetensors, with errors that
/// name the file and the tensor.
#pragma once

#include <map>
#include <string>

#include <ember/core/safetensors.h>
#include <ember/nn/module.h>

namespace ember::nn {

/// Atomic: a crash mid-save leaves the previous file at path intact.
void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata = {});
/// Loads path into module (see Module::load_state_dict for strict).
LoadResult load(Module& module, const std::string& path, bool strict = true);

}  // namespace ember::nn
