// What every demo app shares, written once: the common flags (seed, threads,
// device, out, quiet, --check), the exit-code convention, a main() that
// turns anything escaping into one line on stderr, the output directory
// checked before any work, atomic JSON/text outputs, timers and printf-style
// formatting. An app is:
//
//   int main(int argc, char** argv) {
//     Config c;
//     CLI::App cli{"what the app does"};
//     ember::app::add_threads(cli, c.threads);           // and add_seed/add_device/add_out/add_quiet/add_check
//     ember::app::input_file(cli.add_option("--weights", c.weights, "..."));  // path flags say what they are
//     cli.add_option("--width", c.width, "...")->check(CLI::Range(1, 4096));  // numbers say their range
//     return ember::app::run_main("myapp", cli, argc, argv, [&] { return run(c); });
//   }
//
// Exit codes: 0 done; 2 a bad value (a flag, or a setting read from a file
// the user named: UsageError, CLI11's parse errors); 1 a failure while
// running (ember::Error, I/O, std::filesystem and std::system_error,
// bad_alloc, any std::exception); 130 interrupted (the app returns it).
// Every failure prints exactly one line, "<app>: <why>", on stderr.
//
// Every app also answers --flag-table: its options as JSON (name, type,
// kind), which tests/apps/bad_invocations.cmake turns into the table of bad
// invocations (0, negative, non-number, overflow and huge values for each
// number; missing, directory, FIFO, under-a-file paths for each path). A new
// flag joins that table by being declared; a path flag must be marked with
// input_file / input_dir / output_dir / output_file so that it is tested as
// a path, and --check must stop before the first training step.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ember/core/tensor.h>

namespace ember::app {

inline constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2, kExitInterrupted = 130;

// A bad value the user gave (a flag, or a setting in a file they named):
// exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The common flags. Each returns its CLI11 option for further checks.
// --seed: any unsigned 64-bit value.
CLI::Option* add_seed(CLI::App& cli, uint64_t& seed, const std::string& help = "random seed");
// --threads: 0 (all cores, or EMBER_NUM_THREADS) to ember::kMaxThreads.
CLI::Option* add_threads(CLI::App& cli, int& threads);
// --device: whatever ember::Device parses ("cpu", "cuda", "cuda:N"); that a
// CUDA device exists is checked when the app first uses it (exit 1).
CLI::Option* add_device(CLI::App& cli, std::string& device, const std::string& help = "cpu (default) or cuda / cuda:N");
// --out: the output directory (created and probed by prepare_out_dir).
CLI::Option* add_out(CLI::App& cli, std::string& out);
CLI::Option* add_quiet(CLI::App& cli, bool& quiet);
// --check: validate the flags, the files and the output directory, build the
// model, print "check: ok" and exit 0 before any training.
CLI::Option* add_check(CLI::App& cli, bool& check);

// An integer flag's range. CLI11 2.1 converts an integer that overflows its
// type without a word (--batch-size 99999999999999999999 arrived as a
// number that made seq2seq's batching wrap around: SIGSEGV); this parses
// the whole string as a 64-bit integer, refusing overflow, fractions and
// trailing junk, then checks [lo, hi] (which must fit the option's type).
CLI::Validator int_range(int64_t lo, int64_t hi);
// Any unsigned 64-bit integer (--seed), overflow and signs refused.
CLI::Validator uint64_any();

// A floating-point flag's range, NaN and Inf refused (CLI::Range lets NaN
// through: every comparison with it is false).
CLI::Validator finite_range(double lo, double hi);

// Marks a path option by what it names (its CLI11 type name, shown in
// --help and read by the bad-invocation table).
CLI::Option* input_file(CLI::Option* o);   // FILE: a regular file the app reads
CLI::Option* input_dir(CLI::Option* o);    // DIR: a directory the app reads
CLI::Option* output_dir(CLI::Option* o);   // OUT_DIR: created if missing
CLI::Option* output_file(CLI::Option* o);  // OUT_FILE: written atomically

// Parses argv (bad flags: one line, exit 2; --help: exit 0), answers
// --flag-table, then calls run() and maps what escapes it to one line and
// an exit code (above). In a distributed run a failing rank aborts the job
// (its peers may be waiting in a collective).
int run_main(const char* name, CLI::App& cli, int argc, char** argv, const std::function<int()>& run);

// set_num_threads(threads) unless 0 (the default count).
void apply_threads(int threads);
// Creates dir (and its parents) and checks that a file can be written in
// it, before any work starts; throws UsageError naming the flag and why
// (under a regular file, /dev/null or /proc, read-only, a FIFO in its place).
void prepare_out_dir(const std::string& dir, const std::string& flag = "--out");

// An output file named by a flag (bench --json): its directory must exist
// and take a new file, and the path must not be a directory; checked before
// any work, throws UsageError.
void check_output_file(const std::string& path, const std::string& flag);

// Outputs, written atomically (ember::write_file_atomic) and checked: a
// failure throws ember::IOError naming the path. write_json writes bytes that
// are not UTF-8 inside strings (a path, a sample of a binary corpus) as
// U+FFFD: a report must not fail at the end of a run for the bytes of a name.
void write_json(const std::string& path, const nlohmann::ordered_json& j);
void write_text(const std::string& path, const std::string& text);

// Outputs of one run that appear together or not at all (a run's charts):
// each is written in full beside its path under a temporary name, then all
// are renamed into place. A failure while writing (a full disk) removes the
// temporaries and throws ember::IOError naming the file that failed and
// saying that none of the set was written; the files already in place from
// an earlier run are left as they were.
void write_files_together(const std::vector<std::pair<std::string, std::string>>& files);

// JSON stored in a file the app reads back (checkpoint metadata), parsed
// after a scan of its text: more than max_bytes, or brackets nested more than
// max_depth deep, throw ember::IOError naming file and what before any value
// is built (nlohmann's values are copied, converted and dumped recursively,
// so one nested 100,000 deep overflowed the stack). Invalid JSON throws
// IOError too. Metadata written by the apps is at most 3 deep.
nlohmann::json parse_stored_json(const std::string& text, const std::string& file, const std::string& what,
                                 int max_depth = 64, size_t max_bytes = size_t{16} << 20);

// --eval-only and --resume: a warning on stderr ("<app>: warning: FILE holds
// suspicious values: NAME (NaN or Inf), ...") when the loaded tensors hold
// NaN or Inf or a negative Adam second moment (nn::suspicious_tensors). A
// warning, not an error: scoring or continuing such a state may be what one
// wants to look at (a diverged run), but its figures will say little.
void warn_suspicious(const char* app, const ember::StateDict& tensors, const std::string& file);

// --force-eval: evaluate (or sample from) weights that check_eval_weights
// would refuse. The same flag in every app that evaluates a saved model.
CLI::Option* add_force_eval(CLI::App& cli, bool& force);

// Weights about to be evaluated (--eval-only): when nn::suspicious_tensors
// names any (NaN, Inf, values that overflow in the forward pass, a negative
// variance), an ember::IOError naming `file` and the first of them, unless
// force, which prints warn_suspicious's warning instead and goes on (the
// loss is then checked by check_eval_loss).
void check_eval_weights(const char* app, const ember::StateDict& tensors, const std::string& file, bool force);

// Weights a run builds on (a distillation teacher): the first tensor
// nn::suspicious_tensors names is an ember::IOError naming `file` and it.
// Training from NaN or overflowing weights would only spread them.
void refuse_suspicious(const ember::StateDict& tensors, const std::string& file, const std::string& what);

// An evaluation's mean loss: a NaN or Inf (weights that are broken or
// overflow) throws ember::IOError naming `file`, instead of an accuracy
// reported with exit 0.
void check_eval_loss(double loss, const std::string& file);

// --eval-only takes the model (and what it was trained on) from the weights
// file: a flag the file decides, given with another value than the stored
// one, is a UsageError naming the flag, both values as the command line
// spells them and the file; given with the stored value it is accepted.
void refuse_changed_flag(const CLI::App& cli, const std::string& flag, const std::string& given,
                         const std::string& stored, const std::string& file);
// --eval-only trains nothing: a training flag given with it would do
// nothing, and is a UsageError naming it.
void refuse_training_flags(const CLI::App& cli, const std::vector<std::string>& flags);

// "SIZE bytes, fnv1a64 HEX" of a file's bytes: what a resumed run compares
// to tell that a file it depends on (a distillation teacher) is the one it
// started with. FNV-1a reads a few MB in milliseconds; it guards against a
// file replaced by mistake, not against a forged one. IOError if unreadable.
std::string file_fingerprint(const std::string& path);
// The same of bytes in memory (a corpus read from several files).
std::string bytes_fingerprint(std::string_view bytes);

// A stopwatch.
class Timer {
 public:
  using Clock = std::chrono::steady_clock;
  Timer() : t0_(Clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  void reset() { t0_ = Clock::now(); }

 private:
  Clock::time_point t0_;
};

// printf into a std::string.
std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace ember::app
