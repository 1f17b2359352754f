/// \file
/// Reading and writing safetensors files: an 8-byte little-endian header
/// length, a JSON header {name: {"dtype", "shape", "data_offsets"}} plus an
/// optional "__metadata__" map of strings, padded with spaces to a multiple
/// of 8, then the raw little-endian data.
///
/// Reading validates everything before allocating by it: a header length
/// beyond the file, offsets out of range, overlapping or not matching the
/// dtype and shape, unknown dtypes, and malformed JSON all throw IOError
/// naming the file and the tensor. F32, F64, I64, BOOL, BF16 and F16 load as
/// those dtypes (bit for bit); JSON nested more than 64 deep is refused.
/// Writing is atomic: the data goes to a temporary file in the same directory
/// (`PATH.tmp.<pid>.XXXXXX`), is flushed to disk, then renamed over the target,
/// so a crash never leaves a half-written file in its place. A save killed
/// midway leaves its temporary file; the next successful save of the same
/// path removes such files whose process is gone.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include <ember/core/tensor.h>

namespace ember {

/// Writes tensors (in order, with their names) and string metadata to a safetensors file, atomically: a
/// crash mid-write leaves the previous file. Throws IOError naming the file.
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file (F32, F64, I64, BOOL, BF16 and F16, each as that dtype),
/// checking every header field before it allocates; fills metadata when given. Throws IOError naming
/// the file and the fault.
StateDict load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

/// load_safetensors with the file memory-mapped: every tensor whose data
/// starts at an offset of the file aligned to its element size (the usual
/// case; the format does not promise it) is a view of a private,
/// copy-on-write mapping of its pages, which its storage owns: no copy is
/// made, a page is read from the file when first touched, and an in-place
/// write copies the page and never reaches the file. The other tensors, and
/// BOOL ones (their bytes are checked), are read as load_safetensors reads
/// them, as is every tensor where the system refuses a mapping. The same
/// checks and errors as load_safetensors. Truncating or rewriting the file in
/// place while its tensors live is undefined (a read may fault);
/// save_safetensors replaces a file by renaming, which leaves the mapped one
/// intact.
StateDict map_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

/// The same reader over bytes already in memory (a download, an archive
/// member, a fuzzer's input); `name` stands for the file in error messages.
StateDict load_safetensors_from_memory(const void* data, size_t size, const std::string& name = "<memory>",
                                       std::map<std::string, std::string>* metadata = nullptr);

namespace detail {
/// Test-only seam: when set, save_safetensors calls it once, after the header
/// and the first tensor's data are in the temporary file and before the rest.
/// tests/test_crash_safety.cpp kills the process from it to check that a
/// crash mid-save leaves the previous file whole. Never set it otherwise.
extern void (*g_safetensors_after_partial_write)();
}  // namespace detail

}  // namespace ember
