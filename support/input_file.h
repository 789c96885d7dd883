// Small files optjit reads whole (pipeline files, signing keys, signatures, bundles to sign or
// verify, a --shapes list, an edited kernel source): read only when they are regular files.
//
// A FIFO (or /dev/stdin) waited forever for a writer, /dev/zero filled memory, and a
// directory failed half-way with a stream library's message. The file is opened without
// blocking and examined through the open descriptor, so one swapped for a FIFO between a
// check and the read is still caught. (Safetensors files, read in parts, have a reader of their
// own, with the same rule.)
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "ir/error.h"

namespace optjit::support {

/// The bytes of `path`, or an error that begins with it: "k.pub: is a FIFO; optjit reads only
/// regular files", "shapes.json: is 70000000 bytes, more than the 67108864 read here".
Expected<std::string> read_file(const std::string& path,
                                uintmax_t max_bytes = std::numeric_limits<uintmax_t>::max());

/// Ok when `path` is a regular file (for readers that open it themselves, such as SQLite);
/// else the error read_file gives.
Status check_input_file(const std::string& path);

}  // namespace optjit::support
