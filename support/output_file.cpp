#include "support/output_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string_view>

namespace optjit::support {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kTempInfix = ".tmp-optjit-";

// ---- temporaries to remove on SIGINT/SIGTERM/SIGHUP ------------------------------------
// A fixed table, so that the handler touches nothing but atomics, char arrays and unlink(2).
constexpr int kSlots = 128;
struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 holds a path
  char path[PATH_MAX];
};
Slot g_slots[kSlots];

extern "C" void remove_temporaries_and_die(int sig) {
  for (auto& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0) continue;
      if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) {
        struct sigaction sa {};
        sa.sa_handler = remove_temporaries_and_die;
        sigemptyset(&sa.sa_mask);
        ::sigaction(sig, &sa, nullptr);
      }
    }
  });
}

int claim(const std::string& path) {
  if (path.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_slots[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1;  // more than kSlots at once: still removed on every ordinary path
}

void release(int slot) {
  if (slot >= 0) g_slots[slot].state.store(0, std::memory_order_release);
}

}  // namespace

std::string kind_of(unsigned mode) {
  const mode_t m = static_cast<mode_t>(mode);
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

namespace {

// NAME.tmp-optjit-PID[-wal|-shm|-journal] of processes that are gone.
void remove_stale_temporaries(const fs::path& target) {
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + std::string(kTempInfix);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    std::string_view name(e->d_name);
    if (name.substr(0, prefix.size()) != prefix) continue;
    std::string_view rest = name.substr(prefix.size());
    size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
    std::string_view tail = rest.substr(digits);
    if (digits == 0 || digits > 9 ||
        !(tail.empty() || tail == "-wal" || tail == "-shm" || tail == "-journal"))
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(std::string(rest.substr(0, digits))));
    if (pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    ::unlinkat(::dirfd(d), e->d_name, 0);
  }
  ::closedir(d);
}

Error io_error(const std::string& path, const char* what, int err) {
  return make_error("{}: {} ({})", path, what, std::strerror(err));
}

}  // namespace

struct OutputFile::State {
  std::string path, temp;
  int fd = -1;
  int slot = -1;
  bool flushed = false, committed = false;
};

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::equivalent(a, b, ec)) return true;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return false;
  const fs::path x = fs::weakly_canonical(a, ec), y = fs::weakly_canonical(b, ec);
  return !ec && x == y;
}

Status check_target(const std::string& path) {
  if (path.empty()) return make_error("an output path is empty");
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return io_error(path, "cannot be examined", errno);
    const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : ".";
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      return make_error("{}: the directory {} does not exist", path, dir.string());
    return Status::Ok();
  }
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    auto to = fs::read_symlink(path, ec);
    return make_error(
        "{}: is a symbolic link (to {}); optjit replaces only regular files, so give the file "
        "it points to",
        path, ec ? "?" : to.string());
  }
  if (!S_ISREG(st.st_mode))
    return make_error("{}: is {}; optjit writes only regular files", path, kind_of(st.st_mode));
  if (::access(path.c_str(), W_OK) != 0)
    return make_error("{}: is read-only; optjit will not replace it", path);
  return Status::Ok();
}

Expected<OutputFile> OutputFile::create(std::string path, std::optional<unsigned> mode) {
  OPTJIT_TRY(check_target(path));
  install_handlers();
  remove_stale_temporaries(path);
  auto s = std::make_unique<State>();
  s->path = std::move(path);
  s->temp = s->path + std::string(kTempInfix) + std::to_string(::getpid());
  // Claimed before the file exists, so a signal between the two still removes it.
  s->slot = claim(s->temp);
  const mode_t create_mode = mode ? static_cast<mode_t>(*mode) : 0666;
  for (int attempt = 0; attempt < 2 && s->fd < 0; ++attempt) {
    s->fd = ::open(s->temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, create_mode);
    if (s->fd < 0 && errno == EEXIST) ::unlink(s->temp.c_str());  // this pid's own leftover
  }
  if (s->fd < 0) {
    int err = errno;
    release(s->slot);
    return io_error(s->temp, "cannot create", err);
  }
  struct stat old {};
  if (!mode && ::stat(s->path.c_str(), &old) == 0) ::fchmod(s->fd, old.st_mode & 07777);
  return OutputFile(std::move(s));
}

OutputFile::OutputFile(std::unique_ptr<State> s) : s_(std::move(s)) {}
OutputFile::OutputFile(OutputFile&&) noexcept = default;
OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
  if (this != &o) {
    OutputFile old(std::move(*this));  // cleaned up as it goes out of scope
    s_ = std::move(o.s_);
  }
  return *this;
}

OutputFile::~OutputFile() {
  if (!s_) return;
  if (s_->fd >= 0) ::close(s_->fd);
  if (!s_->committed) {
    ::unlink(s_->temp.c_str());
    for (const char* ext : {"-wal", "-shm", "-journal"}) ::unlink((s_->temp + ext).c_str());
  }
  release(s_->slot);
}

const std::string& OutputFile::temp_path() const { return s_->temp; }
const std::string& OutputFile::path() const { return s_->path; }

Status OutputFile::write(const void* data, size_t bytes) {
  if (s_->fd < 0) return make_error("{}: written after it was closed", s_->path);
  auto* c = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t w = ::write(s_->fd, c, bytes);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error(s_->path, "cannot write", errno);
    }
    c += w;
    bytes -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

namespace {

Status flush(OutputFile::State& s) {
  if (s.flushed) return Status::Ok();
  int fd = s.fd >= 0 ? s.fd : ::open(s.temp.c_str(), O_RDONLY | O_CLOEXEC);  // SQLite's: closed
  if (fd < 0) return io_error(s.path, "cannot write", errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  s.fd = -1;
  if (rc != 0) return io_error(s.path, "cannot write", err);
  s.flushed = true;
  return Status::Ok();
}

Status rename_into_place(OutputFile::State& s) {
  OPTJIT_TRY(check_target(s.path));  // still a file, or nothing: it may have changed meanwhile
  if (::rename(s.temp.c_str(), s.path.c_str()) != 0) return io_error(s.path, "cannot write", errno);
  s.committed = true;
  const fs::path dir = fs::path(s.path).has_parent_path() ? fs::path(s.path).parent_path() : ".";
  if (int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    ::fsync(d);  // the rename itself, durable
    ::close(d);
  }
  return Status::Ok();
}

}  // namespace

Status OutputFile::commit() {
  if (s_->committed) return Status::Ok();
  OPTJIT_TRY(flush(*s_));
  OPTJIT_TRY(rename_into_place(*s_));
  release(s_->slot);
  s_->slot = -1;
  return Status::Ok();
}

Status commit_all(std::vector<OutputFile*> files) {
  for (auto* f : files) OPTJIT_TRY(flush(*f->s_));
  for (auto* f : files) OPTJIT_TRY(check_target(f->s_->path));  // before any rename
  for (auto* f : files) OPTJIT_TRY(f->commit());
  return Status::Ok();
}

Status write_file(const std::string& path, const std::string& bytes, std::optional<unsigned> mode) {
  auto f = OutputFile::create(path, mode);
  if (!f) return f.error();
  OPTJIT_TRY(f->write(bytes));
  return f->commit();
}

}  // namespace optjit::support
