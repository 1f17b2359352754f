// The apps' shared machinery (app.h): flags, main(), outputs.
#include "app.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <string_view>
#include <system_error>

#include <ember/core/device.h>
#include <ember/core/error.h>
#include <ember/core/file_io.h>
#include <ember/core/parallel.h>
#include <ember/nn/checkpoint.h>
#include <ember/ops/collective.h>

namespace ember::app {

namespace fs = std::filesystem;

CLI::Option* add_seed(CLI::App& cli, uint64_t& seed, const std::string& help) {
  return cli.add_option("--seed", seed, help)->check(uint64_any());
}

CLI::Option* add_threads(CLI::App& cli, int& threads) {
  return cli
      .add_option("--threads", threads,
                  "threads (default: all cores, or EMBER_NUM_THREADS; at most " + std::to_string(kMaxThreads) + ")")
      ->check(int_range(0, kMaxThreads));
}

CLI::Option* add_device(CLI::App& cli, std::string& device, const std::string& help) {
  // Ember's own parser decides what a device is, so "cuda:7" and "cpu" pass
  // and "tpu", "cuda:x" or "cuda:-1" are refused with its message.
  const CLI::Validator parses(
      [](std::string& s) -> std::string {
        try {
          (void)Device(s);
          return "";
        } catch (const Error& e) {
          return e.what();
        }
      },
      "DEVICE");
  return cli.add_option("--device", device, help)->check(parses);
}

CLI::Option* add_out(CLI::App& cli, std::string& out) {
  return output_dir(cli.add_option("--out", out, "output directory (default " + out + ")"));
}

CLI::Option* add_quiet(CLI::App& cli, bool& quiet) {
  return cli.add_flag("--quiet", quiet, "print only the summary line");
}

CLI::Option* add_check(CLI::App& cli, bool& check) {
  return cli.add_flag("--check", check,
                      "validate the flags, the files and the output directory, build the model, then exit without "
                      "training");
}

CLI::Validator int_range(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        int64_t v = 0;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (r.ec != std::errc() || r.ptr != s.data() + s.size() || v < lo || v > hi)
          return "value " + s + " is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        return "";
      },
      "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}

CLI::Validator uint64_any() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t v = 0;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (r.ec != std::errc() || r.ptr != s.data() + s.size())
          return "value " + s + " is not an integer in [0, 2^64 - 1]";
        return "";
      },
      "UINT64");
}

CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v) || !std::isfinite(v) || v < lo || v > hi)
          return "value " + s + " is not a number in [" + fmt("%g", lo) + ", " + fmt("%g", hi) + "]";
        return "";
      },
      "FLOAT in [" + fmt("%g", lo) + " - " + fmt("%g", hi) + "]");
}

CLI::Option* input_file(CLI::Option* o) { return o->type_name("FILE"); }
CLI::Option* input_dir(CLI::Option* o) { return o->type_name("DIR"); }
CLI::Option* output_dir(CLI::Option* o) { return o->type_name("OUT_DIR"); }
CLI::Option* output_file(CLI::Option* o) { return o->type_name("OUT_FILE"); }

namespace {

// Messages may carry newlines (nlohmann's, a nested error): one line each.
std::string one_line(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// The options as JSON, for tests/apps/bad_invocations.cmake.
std::string flag_table(const CLI::App& cli) {
  nlohmann::ordered_json t = nlohmann::ordered_json::array();
  for (const CLI::Option* o : cli.get_options()) {
    if (o->get_lnames().empty()) continue;  // positionals; --help has one
    const std::string name = "--" + o->get_lnames().front();
    if (name == "--help" || name == "--flag-table") continue;
    // CLI11 appends its validators' names ("INT:INT in [1 - 100]"): the type is what comes first.
    const std::string full = o->get_type_name(), type = full.substr(0, full.find(':'));
    std::string kind = "text";
    if (o->get_type_size_max() == 0)
      kind = "flag";
    else if (type == "INT" || type == "UINT")
      kind = "int";
    else if (type == "FLOAT")
      kind = "float";
    else if (type == "FILE")
      kind = "file";
    else if (type == "DIR")
      kind = "dir";
    else if (type == "OUT_DIR")
      kind = "out_dir";
    else if (type == "OUT_FILE")
      kind = "out_file";
    nlohmann::ordered_json needs = nlohmann::ordered_json::array();
    for (const CLI::Option* n : o->get_needs()) needs.push_back("--" + n->get_lnames().front());
    t.push_back({{"name", name}, {"type", full}, {"kind", kind}, {"needs", needs}});
  }
  return t.dump();
}

int fail(const char* name, int code, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", name, one_line(why).c_str());
  std::fflush(stderr);
  if (distributed::world_size() > 1) distributed::abort(code);
  return code;
}

}  // namespace

int run_main(const char* name, CLI::App& cli, int argc, char** argv, const std::function<int()>& run) {
  bool table = false;
  cli.add_flag("--flag-table", table, "print the options as JSON (for the bad-invocation tests) and exit")->group("");
  // CLI11 reads "--out=" as the flag without its value and takes the next
  // argument for it ("--out= --check" would write into a directory named
  // --check): an empty value after '=' is refused here.
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() > 3 && arg.starts_with("--") && arg.back() == '=' && arg.find('=') == arg.size() - 1)
      return fail(name, kExitUsage,
                  std::string(arg) + ": an empty value after '=' (give one, or '" +
                      std::string(arg.substr(0, arg.size() - 1)) + " \"\"' for an empty string; see --help)");
  }
  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return cli.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return cli.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(name, kExitUsage, std::string(e.what()) + " (see --help)");
  }
  if (table) {
    std::printf("%s\n", flag_table(cli).c_str());
    return kExitOk;
  }
  try {
    return run();
  } catch (const UsageError& e) {
    return fail(name, kExitUsage, e.what());
  } catch (const CLI::Error& e) {
    return fail(name, kExitUsage, e.what());
  } catch (const Error& e) {
    return fail(name, kExitFailure, e.what());
  } catch (const nlohmann::json::exception& e) {
    return fail(name, kExitFailure, std::string("bad JSON: ") + e.what());
  } catch (const fs::filesystem_error& e) {
    return fail(name, kExitFailure, e.what());
  } catch (const std::system_error& e) {
    return fail(name, kExitFailure, std::string("system error: ") + e.what());
  } catch (const std::bad_alloc&) {
    return fail(name, kExitFailure,
                "out of memory (std::bad_alloc): a size in the flags or in a file read is too large for this machine");
  } catch (const std::exception& e) {
    return fail(name, kExitFailure, e.what());
  } catch (...) {
    return fail(name, kExitFailure, "unknown exception");
  }
}

void apply_threads(int threads) {
  if (threads > 0) set_num_threads(threads);
}

void prepare_out_dir(const std::string& dir, const std::string& flag) {
  if (dir.empty()) throw UsageError(flag + " '': an empty path (give the directory to write the outputs into)");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UsageError(flag + " '" + dir + "': cannot create the directory: " + ec.message());
  if (!fs::is_directory(dir, ec)) throw UsageError(flag + " '" + dir + "': not a directory");
  // A probe file: permissions, a read-only mount, /proc and /sys all say no
  // here, before minutes of training, instead of at the first save.
  std::string probe = (fs::path(dir) / ".ember-write-probe.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) throw UsageError(flag + " '" + dir + "': cannot write into it: " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_output_file(const std::string& path, const std::string& flag) {
  if (path.empty()) throw UsageError(flag + " '': an empty path (give the file to write)");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw UsageError(flag + " '" + path + "': is a directory");
  const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec))
    throw UsageError(flag + " '" + path + "': its directory '" + parent.string() +
                     "' does not exist or is not a directory");
  std::string probe = (parent / ".ember-write-probe.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0)
    throw UsageError(flag + " '" + path + "': cannot write in '" + parent.string() + "': " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

nlohmann::json parse_stored_json(const std::string& text, const std::string& file, const std::string& what,
                                 int max_depth, size_t max_bytes) {
  const std::string where = file + ": " + what;
  if (text.size() > max_bytes)
    throw IOError(where + " is " + std::to_string(text.size()) + " bytes of JSON, over the limit of " +
                  std::to_string(max_bytes));
  // Brackets outside strings; the parser checks everything else.
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > max_depth)
        throw IOError(where + " is JSON nested more than " + std::to_string(max_depth) + " deep");
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw IOError(where + " is not valid JSON (" + e.what() + ")");
  }
}

void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  write_file_atomic(path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

void write_text(const std::string& path, const std::string& text) { write_file_atomic(path, text); }

void write_files_together(const std::vector<std::pair<std::string, std::string>>& files) {
  // Temporaries beside their targets (the same file system, so that rename
  // moves no data and needs no space), each complete and synced by
  // write_file_atomic before the first rename.
  std::vector<std::string> staged;
  const auto remove_staged = [&] {
    for (const std::string& t : staged) ::unlink(t.c_str());
  };
  for (const auto& [path, bytes] : files) {
    const fs::path p(path);
    const std::string tmp = (p.parent_path() / ("." + p.filename().string() + ".together")).string();
    try {
      write_file_atomic(tmp, bytes);
    } catch (const Error& e) {
      remove_staged();
      std::string all;
      for (const auto& f : files) all += (all.empty() ? "" : ", ") + fs::path(f.first).filename().string();
      throw IOError(path + ": " + e.what() + "; none of " + all + " was written");
    }
    staged.push_back(tmp);
  }
  for (size_t i = 0; i < files.size(); ++i)
    if (::rename(staged[i].c_str(), files[i].first.c_str()) != 0) {
      const std::string err = std::strerror(errno);
      std::string done;
      for (size_t k = 0; k < i; ++k) done += (done.empty() ? "" : ", ") + files[k].first;
      for (size_t k = i; k < files.size(); ++k) ::unlink(staged[k].c_str());
      throw IOError(files[i].first + ": cannot move it into place: " + err +
                    "; written: " + (done.empty() ? std::string("none") : done));
    }
}

void warn_suspicious(const char* app, const StateDict& tensors, const std::string& file) {
  const std::vector<std::string> bad = nn::suspicious_tensors(tensors);
  if (bad.empty()) return;
  std::string list;
  for (size_t i = 0; i < bad.size() && i < 4; ++i) list += (i ? ", " : "") + bad[i];
  if (bad.size() > 4) list += ", and " + std::to_string(bad.size() - 4) + " more";
  std::fprintf(stderr, "%s: warning: %s holds suspicious values: %s\n", app, file.c_str(), list.c_str());
}

CLI::Option* add_force_eval(CLI::App& cli, bool& force) {
  return cli.add_flag("--force-eval", force,
                      "evaluate --weights even when they hold NaN, Inf or overflowing values (refused otherwise); a "
                      "non-finite loss still exits 1");
}

void check_eval_weights(const char* app, const StateDict& tensors, const std::string& file, bool force) {
  if (force) return warn_suspicious(app, tensors, file);
  const std::vector<std::string> bad = nn::suspicious_tensors(tensors);
  if (!bad.empty())
    throw IOError(file + ": tensor " + bad[0] +
                  (bad.size() > 1 ? " (and " + std::to_string(bad.size() - 1) + " more)" : "") +
                  "; refusing to evaluate it (--force-eval evaluates it anyway)");
}

void refuse_suspicious(const StateDict& tensors, const std::string& file, const std::string& what) {
  const std::vector<std::string> bad = nn::suspicious_tensors(tensors);
  if (!bad.empty()) throw IOError(what + " " + file + ": tensor " + bad[0] + "; refusing to train from it");
}

namespace {

// FNV-1a 64 over bytes fed in pieces: the offset basis, then per byte xor and * prime.
struct Fnv1a64 {
  uint64_t h = 14695981039346656037ull, size = 0;
  void add(const char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
    size += n;
  }
  std::string str() const {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    return std::to_string(size) + " bytes, fnv1a64 " + hex;
  }
};

}  // namespace

std::string file_fingerprint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IOError("cannot read " + path + ": " + std::strerror(errno));
  Fnv1a64 f;
  std::vector<char> buf(size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    f.add(buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw IOError("error reading " + path);
  return f.str();
}

std::string bytes_fingerprint(std::string_view bytes) {
  Fnv1a64 f;
  f.add(bytes.data(), bytes.size());
  return f.str();
}

void check_eval_loss(double loss, const std::string& file) {
  if (!std::isfinite(loss))
    throw IOError("the test loss of " + file + " is " + (std::isnan(loss) ? "NaN" : "Inf") +
                  ": its weights are broken or overflow (see the warning above); no accuracy is reported");
}

void refuse_changed_flag(const CLI::App& cli, const std::string& flag, const std::string& given,
                         const std::string& stored, const std::string& file) {
  if (!cli.count(flag) || given == stored) return;
  throw UsageError(flag + " " + given + " differs from the " + stored + " that " + file +
                   " was trained with: --eval-only scores the file's model (leave " + flag + " out)");
}

void refuse_training_flags(const CLI::App& cli, const std::vector<std::string>& flags) {
  for (const std::string& f : flags)
    if (cli.count(f)) throw UsageError(f + " is for training, not --eval-only (leave it out)");
}

std::string fmt(const char* format, ...) {
  va_list ap, ap2;
  va_start(ap, format);
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, format, ap);
  va_end(ap);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, format, ap2);
  va_end(ap2);
  return s;
}

}  // namespace ember::app
