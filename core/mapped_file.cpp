// Tensors as copy-on-write mappings of a file's pages (see mapped_file.h).
#include <ember/core/mapped_file.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <ember/core/error.h>
#include <ember/core/file_io.h>
#include <ember/core/storage.h>

namespace ember {

MappedFile::MappedFile(const std::string& path, const std::string& what) : path_(path), what_(what) {
  require_regular_file(path, what);
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0)
    throw IOError(what + " '" + path +
                  "': cannot open: " + (errno == EACCES ? "permission denied" : std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw IOError(what + " '" + path + "': cannot stat: " + std::strerror(err));
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

MappedFile::~MappedFile() {
  if (fd_ >= 0) ::close(fd_);
}

void MappedFile::read(uint64_t at, void* dst, size_t n) const {
  EMBER_CHECK(at <= size_ && n <= size_ - at, IOError, what_, " '", path_, "': bytes [", at, ", ", at + n,
              ") are past its end (", size_, " bytes)");
  char* out = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    EMBER_CHECK(got > 0, IOError, what_, " '", path_, "': read failed at byte ", at, ": ",
                got < 0 ? std::strerror(errno) : "unexpected end of file (truncated while reading?)");
    out += got, at += static_cast<uint64_t>(got), n -= static_cast<size_t>(got);
  }
}

Tensor MappedFile::try_map(uint64_t at, const Shape& shape, DType dtype) const {
  const uint64_t nbytes = static_cast<uint64_t>(shape.numel()) * itemsize(dtype);
  EMBER_CHECK(at <= size_ && nbytes <= size_ - at, IOError, what_, " '", path_, "': a tensor of shape ", shape.str(),
              " at byte ", at, " needs ", nbytes, " bytes, past the file's end (", size_, " bytes)");
  if (nbytes == 0) return Tensor();
  // mmap maps whole pages: from the page holding the first byte.
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = at / page * page, delta = at - start;
  const size_t len = static_cast<size_t>(delta + nbytes);
  void* base = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_, static_cast<off_t>(start));
  if (base == MAP_FAILED) return Tensor();
  std::shared_ptr<const void> owner(base, [len](const void* p) { munmap(const_cast<void*>(p), len); });
  auto storage =
      std::make_shared<Storage>(static_cast<char*>(base) + delta, static_cast<size_t>(nbytes), kCPU, std::move(owner));
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), shape, contiguous_strides(shape), 0, dtype));
}

Tensor MappedFile::tensor(uint64_t at, const Shape& shape, DType dtype) const {
  Tensor t = try_map(at, shape, dtype);
  if (t.defined()) return t;
  t = empty(shape, TensorOptions(dtype));
  if (t.numel() > 0) read(at, t.data_ptr(), static_cast<size_t>(t.numel()) * itemsize(dtype));
  return t;
}

}  // namespace ember
