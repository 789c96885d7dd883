#include "support/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "support/output_file.h"

namespace optjit::support {

namespace {

Status regular(const std::string& path, const struct stat& st) {
  if (S_ISREG(st.st_mode)) return Status::Ok();
  const std::string kind = kind_of(st.st_mode);
  return kind == "not a regular file"
             ? make_error("{}: is not a regular file; optjit reads only regular files", path)
             : make_error("{}: is {}; optjit reads only regular files", path, kind);
}

}  // namespace

Status check_input_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return make_error("{}: cannot open ({})", path, std::strerror(errno));
  return regular(path, st);
}

Expected<std::string> read_file(const std::string& path, uintmax_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading waits for a writer without it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return make_error("{}: cannot open ({})", path, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return make_error("{}: cannot examine ({})", path, std::strerror(errno));
  OPTJIT_TRY(regular(path, st));
  const auto size = static_cast<uintmax_t>(st.st_size);
  if (size > max_bytes)
    return make_error("{}: is {} bytes, more than the {} read here", path, size, max_bytes);
  std::string data;
  data.resize(static_cast<size_t>(size));
  size_t done = 0;
  while (true) {
    // Past its size: it grew since it was examined (or is a /proc file, which says 0).
    if (done == data.size()) data.resize(data.size() + 4096);
    const ssize_t n = ::read(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error("{}: reading it failed ({})", path, std::strerror(errno));
    if (n == 0) break;
    done += static_cast<size_t>(n);
    if (done > max_bytes)
      return make_error("{}: grew past the {} bytes read here while it was read", path, max_bytes);
  }
  data.resize(done);
  return data;
}

}  // namespace optjit::support
