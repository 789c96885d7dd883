// Files that optjit writes appear whole or not at all, and never replace what is not a file.
//
// An OutputFile is written under a temporary name beside its target (`NAME.tmp-optjit-PID`)
// and renamed over the target only by commit(). Until then the target is untouched: a failed
// command, an exception, SIGINT, SIGTERM or SIGHUP leave no temporary behind (the last three
// through a handler that is installed only where the signal's disposition is the default, so
// a host program's own handlers, Python's among them, are kept). A temporary left by a process
// that was killed outright (SIGKILL, a power cut) is removed by the next write to the same
// target, once its process is gone.
//
// A target that exists but is not a regular file (a device such as /dev/full, a directory, a
// FIFO, a socket) or is a symbolic link is refused with a message: the rename would replace
// it.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/error.h"

namespace optjit::support {

/// What a file that is not a regular one is, by its st_mode: "a directory", "a FIFO", "a
/// character device", ... (for messages).
std::string kind_of(unsigned mode);

class OutputFile {
 public:
  /// Checks the target and opens a fresh temporary beside it. Its permissions: `mode` (less
  /// the umask) if given, else the target's if it exists, else 0666 less the umask.
  static Expected<OutputFile> create(std::string path, std::optional<unsigned> mode = {});

  OutputFile(OutputFile&&) noexcept;
  OutputFile& operator=(OutputFile&&) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  /// Removes the temporary unless commit() succeeded.
  ~OutputFile();

  Status write(const void* data, size_t bytes);
  Status write(const std::string& bytes) { return write(bytes.data(), bytes.size()); }
  /// The temporary's path, for writers that open it themselves (SQLite). Close it before
  /// commit().
  const std::string& temp_path() const;
  const std::string& path() const;
  /// Flushes to disk and renames the temporary over the target.
  Status commit();

  struct State;

 private:
  friend Status commit_all(std::vector<OutputFile*> files);
  explicit OutputFile(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

/// Writes `bytes` to `path` through an OutputFile.
Status write_file(const std::string& path, const std::string& bytes,
                  std::optional<unsigned> mode = {});

/// Commits several files after all of them are written: none is renamed unless every one was
/// written and every target can still be replaced, so such a failure leaves every target as
/// it was. (Renames are one at a time: a failure of rename(2) itself after the first leaves
/// the earlier ones done. That needs the file system to fail between two renames in one
/// directory.)
Status commit_all(std::vector<OutputFile*> files);

/// Whether `path` may be written: it does not exist, or is a regular file (not a link).
Status check_target(const std::string& path);

/// Whether two paths name one file: the same existing file (through links, "./a" and "a"), or,
/// where one does not exist yet, the same path once made absolute and normal.
bool same_file(const std::string& a, const std::string& b);

}  // namespace optjit::support
