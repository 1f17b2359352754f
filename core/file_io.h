/// \file
/// The two file rules every reader and writer in Ember follows, and a
/// reader of whole files that keeps the first.
///
/// Reading: a path must name a regular file. A directory, FIFO, socket or
/// device is refused by stat() before anything opens it: opening a FIFO
/// blocks until a writer comes (forever, for a mistyped --weights), and a
/// device or a directory would be misread. require_regular_file throws
/// IOError naming the path and what it is instead.
///
/// Writing: atomic. The bytes go to a temporary file beside the target
/// (`PATH.tmp.<pid>.XXXXXX`), are flushed to disk, then renamed over the
/// target, so a crash, a full disk or a kill never leaves a half-written file
/// in its place; every write, the flush and the rename are checked and a
/// failure throws IOError naming the path (the temporary is removed). A write
/// killed midway leaves its temporary; the next successful write of the same
/// path removes such files whose process is gone. save_safetensors, the
/// apps' JSON, CSV and PNG outputs all go through write_file_atomic.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace ember {

/// Throws IOError ("<what> '<path>': no such file", "... is a directory", "... is a FIFO (named pipe)",
/// "... permission denied", ...) unless path names a regular file (symbolic links followed).
void require_regular_file(const std::string& path, const std::string& what = "file");

/// The whole of the regular file at path, as bytes. Throws IOError naming `what` and the path:
/// require_regular_file's errors, "<what> '<path>': cannot open", "... read failed".
std::string read_file(const std::string& path, const std::string& what = "file");

/// Hands `fill` a writer; what fill writes through it becomes the file at path, atomically. An exception
/// from fill (or a failed write) leaves the previous file and no temporary, and propagates.
using ByteWriter = std::function<void(const void* data, size_t size)>;
void write_file_atomic(const std::string& path, const std::function<void(const ByteWriter&)>& fill);
/// The same for bytes already in memory (JSON, CSV, an encoded PNG).
void write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace ember
