/// \file
/// A file's bytes as CPU tensors without reading them first: each tensor is a
/// private copy-on-write mapping of the pages that hold it, owned by the
/// tensor's storage. A page is read from the file when first touched; an
/// in-place write copies the page and never reaches the file; a tensor that
/// is dropped gives its pages back at once (one mapping per tensor). The
/// safetensors reader and the llm.c GPT-2 checkpoint reader map their
/// weights this way, so a model loads without a second copy of them.
///
/// Truncating or rewriting the file in place while its tensors live is
/// undefined (a read of a page past the new end faults); Ember's writers
/// replace files by renaming (core/file_io.h), which leaves a mapped file
/// intact.
#pragma once

#include <cstdint>
#include <string>

#include <ember/core/tensor.h>

namespace ember {

/// An open file to map tensors from.
class MappedFile {
 public:
  /// Opens path for reading after require_regular_file(path, what); IOError
  /// naming both when it cannot.
  MappedFile(const std::string& path, const std::string& what);
  ~MappedFile();  ///< closes the descriptor: the mappings outlive it
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  /// The file's size in bytes, when opened.
  uint64_t size() const { return size_; }
  /// n bytes at offset `at` into dst; IOError naming the file unless all were read.
  void read(uint64_t at, void* dst, size_t n) const;
  /// The bytes [at, at + numel * itemsize) as a contiguous tensor of shape
  /// and dtype: mapped, or read into a fresh tensor where the system refuses
  /// the mapping. IOError naming the file when the range is past its end.
  Tensor tensor(uint64_t at, const Shape& shape, DType dtype) const;
  /// Only the mapping: undefined where the system refuses it.
  Tensor try_map(uint64_t at, const Shape& shape, DType dtype) const;

 private:
  std::string path_, what_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace ember
