// Writes a damaged copy of a safetensors file, for the tests of what the apps
// read back (tests/apps/damaged_files.cmake): metadata fields replaced,
// tensors dropped, converted to another dtype, or filled with NaN.
// Usage: rewrite_safetensors IN OUT EDIT...
//   meta:KEY=VALUE   set a metadata string      drop:NAME     remove a tensor
//   f32:NAME         store NAME as float32      nan:NAME      NAME's first value NaN
//   neg:NAME         NAME's first value -1       set:NAME=V    every value of NAME V
//   deep:KEY=N       set a metadata string to a JSON array nested N deep
//                    (too long for a command-line argument)
//   json:KEY.FIELD=V in the JSON object stored under metadata KEY, set
//                    FIELD to the JSON value V (1e9, "abc", null, [1])
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <ember/ember.h>
#include <nlohmann/json.hpp>

using namespace ember;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: rewrite_safetensors IN OUT EDIT...\n");
    return 2;
  }
  try {
    std::map<std::string, std::string> meta;
    StateDict sd = load_safetensors(argv[1], &meta);
    for (int i = 3; i < argc; ++i) {
      const std::string e = argv[i], op = e.substr(0, e.find(':')), arg = e.substr(e.find(':') + 1);
      if (op == "meta") {
        meta[arg.substr(0, arg.find('='))] = arg.substr(arg.find('=') + 1);
        continue;
      }
      if (op == "json") {
        const std::string key = arg.substr(0, arg.find('.')), rest = arg.substr(arg.find('.') + 1);
        nlohmann::ordered_json j = nlohmann::ordered_json::parse(meta.at(key));
        j[rest.substr(0, rest.find('='))] = nlohmann::ordered_json::parse(rest.substr(rest.find('=') + 1));
        meta[key] = j.dump();
        continue;
      }
      if (op == "deep") {
        const size_t n = std::stoul(arg.substr(arg.find('=') + 1));
        meta[arg.substr(0, arg.find('='))] = std::string(n, '[') + std::string(n, ']');
        continue;
      }
      const std::string name = op == "set" ? arg.substr(0, arg.find('=')) : arg;
      bool found = false;
      for (auto it = sd.begin(); it != sd.end(); ++it) {
        if (it->first != name) continue;
        found = true;
        if (op == "drop") {
          sd.erase(it);
          break;
        }
        if (op == "f32") {
          it->second = it->second.to(kFloat32);
        } else if (op == "set") {
          // strtod, not stod: "nan" and "1e300" as written, no exception on "inf".
          const double v = std::strtod(arg.c_str() + arg.find('=') + 1, nullptr);
          it->second = full_like(it->second.to(kFloat64), v).to(it->second.dtype());
        } else if (op == "nan" || op == "neg") {
          Tensor t = it->second.to(kFloat64).contiguous().clone();
          static_cast<double*>(t.data_ptr())[0] = op == "nan" ? std::nan("") : -1.0;
          it->second = t.to(it->second.dtype());
        } else {
          std::fprintf(stderr, "rewrite_safetensors: unknown edit %s\n", e.c_str());
          return 2;
        }
        break;
      }
      if (!found) {
        std::fprintf(stderr, "rewrite_safetensors: no tensor %s\n", name.c_str());
        return 2;
      }
    }
    save_safetensors(argv[2], sd, meta);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rewrite_safetensors: %s\n", e.what());
    return 1;
  }
  return 0;
}
