// Regular-file checks before reading, whole-file reads, and atomic writes
// (see file_io.h).
#include <ember/core/file_io.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ember/core/error.h>

namespace ember {

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  // stat, never open: opening a FIFO blocks until a writer appears.
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    throw IOError(what + " '" + path + "': " +
                  (err == ENOENT    ? std::string("no such file")
                   : err == ENOTDIR ? std::string("a parent of it is not a directory")
                                    : std::string(std::strerror(err))));
  }
  const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                                            : nullptr;
  if (kind) throw IOError(what + " '" + path + "': is " + kind + ", not a regular file");
  if (!S_ISREG(st.st_mode)) throw IOError(what + " '" + path + "': not a regular file");
}

std::string read_file(const std::string& path, const std::string& what) {
  require_regular_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IOError(what + " '" + path + "': cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IOError(what + " '" + path + "': read failed");
  return ss.str();
}

namespace {

// The temporary file of a write of `path` by this process: PATH.tmp.<pid>.
// and mkstemp's six characters. The name says whose it is and which process
// wrote it, and `*.safetensors` globs never match it.
std::string temporary_name_template(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid()) + ".XXXXXX";
}

// Removes what killed writes of `path` left: files named PATH.tmp.<pid>.XXXXXX
// whose process no longer exists. A living process's file may be a write in
// progress (another thread, another program) and stays, as does anything
// not named exactly so. Best effort: a file that cannot be removed is left.
void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = name.substr(prefix.size());  // <pid>.XXXXXX
    const size_t dot = rest.find('.');
    if (dot == std::string::npos || dot == 0 || dot > 9 || rest.size() != dot + 7) continue;
    const auto digit = [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; };
    const auto alnum = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) != 0; };
    if (!std::all_of(rest.begin(), rest.begin() + static_cast<long>(dot), digit) ||
        !std::all_of(rest.begin() + static_cast<long>(dot) + 1, rest.end(), alnum))
      continue;
    const auto pid = static_cast<pid_t>(std::stol(rest.substr(0, dot)));  // at most 9 digits
    // kill(pid, 0) delivers nothing; ESRCH means there is no such process.
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code type_ec, rm_ec;
    if (it->is_regular_file(type_ec)) fs::remove(it->path(), rm_ec);
  }
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IOError("cannot write '" + path + "': " + what);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(const ByteWriter&)>& fill) {
  std::string tmp = temporary_name_template(path);
  std::vector<char> name(tmp.begin(), tmp.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) fail(path, std::string("cannot create a temporary file beside it: ") + std::strerror(errno));
  tmp = name.data();
  bool open = true;
  auto abandon = [&] {
    if (open) ::close(fd);
    open = false;
    ::unlink(tmp.c_str());
  };
  const ByteWriter write_all = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd, c, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail(path, std::string("write failed: ") + std::strerror(errno));
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
  };
  try {
    fill(write_all);
  } catch (...) {
    abandon();
    throw;
  }
  if (::fsync(fd) != 0) {
    const std::string err = std::strerror(errno);
    abandon();
    fail(path, "flush failed: " + err);
  }
  open = false;
  if (::close(fd) != 0) {
    const std::string err = std::strerror(errno);
    abandon();
    fail(path, "flush failed: " + err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    abandon();
    fail(path, "cannot rename the temporary file into place: " + err);
  }
  remove_stale_temporaries(path);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, [&](const ByteWriter& write) { write(bytes.data(), bytes.size()); });
}

}  // namespace ember
