// Files optjit writes: whole or not at all, never over something that is not a regular file,
// and no temporaries left behind by failures, signals or (on the next write) a killed process.
// Files it reads whole: only regular ones, never waited on or read without end.
#include "support/output_file.h"
#include "support/input_file.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "test_dir.h"

namespace optjit::support {
namespace {

namespace fs = std::filesystem;

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir("out"); }
  void TearDown() override { test::remove_test_dir(dir_); }
  std::string p(const std::string& n) const { return (dir_ / n).string(); }
  static std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static void put(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  // Every entry of the directory, by name.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  // A PID that belonged to a process that has exited (reaped), for stale temporaries.
  static pid_t dead_pid() {
    pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    int status = 0;
    ::waitpid(child, &status, 0);
    return child;
  }
  fs::path dir_;
};

TEST_F(OutputFileTest, CommitReplacesTheTargetAndNothingElseIsLeft) {
  put(p("out"), "old");
  ::chmod(p("out").c_str(), 0640);
  ASSERT_TRUE(write_file(p("out"), "new contents"));
  EXPECT_EQ(slurp(p("out")), "new contents");
  struct stat st {};
  ASSERT_EQ(::stat(p("out").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u) << "a replaced file keeps its permissions";
  EXPECT_EQ(entries(), std::vector<std::string>{"out"});
  ASSERT_TRUE(write_file(p("secret"), "k", 0600));
  ASSERT_EQ(::stat(p("secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(OutputFileTest, AnAbandonedFileLeavesTheTargetAsItWas) {
  put(p("out"), "old");
  {
    auto f = OutputFile::create(p("out"));
    ASSERT_TRUE(f);
    ASSERT_TRUE(f->write(std::string("half of the new")));
    EXPECT_TRUE(fs::exists(f->temp_path()));
    EXPECT_EQ(f->temp_path(), p("out") + ".tmp-optjit-" + std::to_string(::getpid()));
  }  // no commit: an error path
  EXPECT_EQ(slurp(p("out")), "old");
  EXPECT_EQ(entries(), std::vector<std::string>{"out"});
}

TEST_F(OutputFileTest, RefusesWhatIsNotARegularFileWithAMessageNamingIt) {
  auto message = [](const std::string& path) {
    auto f = OutputFile::create(path);
    return f ? std::string("accepted") : f.error().message;
  };
  // A FIFO stands in for a device (/dev/full): the rename would replace the node.
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0644), 0);
  EXPECT_EQ(message(p("fifo")), p("fifo") + ": is a FIFO; optjit writes only regular files");
  EXPECT_TRUE(fs::is_fifo(p("fifo")));
  EXPECT_EQ(message("/dev/null"),
            "/dev/null: is a character device; optjit writes only regular files");
  fs::create_directory(p("dir"));
  EXPECT_EQ(message(p("dir")), p("dir") + ": is a directory; optjit writes only regular files");
  put(p("real"), "data");
  fs::create_symlink(p("real"), p("link"));
  EXPECT_EQ(message(p("link")),
            p("link") + ": is a symbolic link (to " + p("real") +
                "); optjit replaces only regular files, so give the file it points to");
  EXPECT_TRUE(fs::is_symlink(p("link")));
  EXPECT_EQ(slurp(p("real")), "data");
  EXPECT_EQ(message(p("missing/x")),
            p("missing/x") + ": the directory " + p("missing") + " does not exist");
  EXPECT_EQ(message(""), "an output path is empty");
  if (::geteuid() != 0) {  // root writes read-only files anyway; the check is for users
    put(p("ro"), "keep");
    ::chmod(p("ro").c_str(), 0444);
    EXPECT_EQ(message(p("ro")), p("ro") + ": is read-only; optjit will not replace it");
  }
  // Nothing was created by any refusal.
  EXPECT_EQ(entries().size(), ::geteuid() != 0 ? 5u : 4u);
}

// A full disk, in a child whose file size limit is 16 bytes (EFBIG stands in for ENOSPC: both
// fail write(2) part way): the error names the target and the cause, the target keeps its
// contents, and the temporary is gone.
TEST_F(OutputFileTest, AWriteThatFailsPartWayLeavesTheTargetAndNoTemporary) {
  put(p("out"), "old");
  pid_t child = ::fork();
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim {
      16, RLIM_INFINITY
    };
    ::setrlimit(RLIMIT_FSIZE, &lim);
    Status st = write_file(p("out"), std::string(1000, 'x'));
    lim.rlim_cur = RLIM_INFINITY;
    ::setrlimit(RLIMIT_FSIZE, &lim);
    std::ofstream(p("message.txt")) << (st ? std::string("written") : st.error().message);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(slurp(p("message.txt")), p("out") + ": cannot write (File too large)");
  EXPECT_EQ(slurp(p("out")), "old");
  EXPECT_EQ(entries(), (std::vector<std::string>{"message.txt", "out"}));
}

// Several files are renamed only when every one is written and every target is still a
// regular file (or absent): a target that turned into a directory meanwhile stops them all.
TEST_F(OutputFileTest, CommitAllRenamesNoneUnlessEveryTargetCanBeReplaced) {
  put(p("a"), "old a");
  put(p("b"), "old b");
  {
    auto a = OutputFile::create(p("a"));
    auto b = OutputFile::create(p("b"));
    ASSERT_TRUE(a && b);
    ASSERT_TRUE(a->write(std::string("new a")));
    ASSERT_TRUE(b->write(std::string("new b")));
    ASSERT_TRUE(commit_all({&*a, &*b}));
  }
  EXPECT_EQ(slurp(p("a")), "new a");
  EXPECT_EQ(slurp(p("b")), "new b");
  {
    auto a = OutputFile::create(p("a"));
    auto c = OutputFile::create(p("c"));
    ASSERT_TRUE(a && c);
    ASSERT_TRUE(a->write(std::string("newer a")));
    ASSERT_TRUE(c->write(std::string("c")));
    fs::create_directory(p("c"));
    Status st = commit_all({&*a, &*c});
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().message, p("c") + ": is a directory; optjit writes only regular files");
  }
  EXPECT_EQ(slurp(p("a")), "new a") << "not renamed: its companion could not be";
  EXPECT_EQ(entries(), (std::vector<std::string>{"a", "b", "c"}));
}

TEST_F(OutputFileTest, StaleTemporariesOfDeadProcessesAreRemovedByTheNextWrite) {
  const std::string dead = std::to_string(dead_pid());
  for (const char* tail : {"", "-wal", "-journal"}) put(p("out.tmp-optjit-" + dead + tail), "x");
  put(p("out.tmp-optjit-1"), "init's");  // PID 1 is alive: not ours to remove
  put(p("other.tmp-optjit-" + dead), "another target's");
  put(p("out.tmp-optjit-" + dead + ".bak"), "not a temporary's name");
  ASSERT_TRUE(write_file(p("out"), "fresh"));
  EXPECT_EQ(entries(),
            (std::vector<std::string>{"other.tmp-optjit-" + dead, "out", "out.tmp-optjit-1",
                                      "out.tmp-optjit-" + dead + ".bak"}));
}

// A process killed by SIGTERM (or SIGINT, SIGHUP) while writing removes its temporary; one
// killed by SIGKILL cannot, and the next write removes it.
TEST_F(OutputFileTest, SignalsRemoveTemporariesAndSigkillLeftoversGoNextTime) {
  put(p("out"), "old");
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGKILL}) {
    pid_t child = ::fork();
    if (child == 0) {
      auto f = OutputFile::create(p("out"));
      if (!f || !f->write(std::string("partial"))) ::_exit(3);
      ::raise(sig);
      ::_exit(4);  // not reached
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig << ": status " << status;
    EXPECT_EQ(WTERMSIG(status), sig) << "the signal is re-raised after the clean-up";
    const std::string temp = p("out.tmp-optjit-" + std::to_string(child));
    if (sig == SIGKILL) {
      EXPECT_TRUE(fs::exists(temp));
      ASSERT_TRUE(write_file(p("out"), "after the kill"));
      EXPECT_FALSE(fs::exists(temp)) << "removed once its process is gone";
    } else {
      EXPECT_FALSE(fs::exists(temp)) << "signal " << sig;
      EXPECT_EQ(slurp(p("out")), "old");
    }
  }
  EXPECT_EQ(slurp(p("out")), "after the kill");
  EXPECT_EQ(entries(), std::vector<std::string>{"out"});
}

// A host program's own handler (Python's SIGINT, for one) is kept, not replaced.
TEST_F(OutputFileTest, AHostsOwnSignalHandlerIsKept) {
  pid_t child = ::fork();
  if (child == 0) {
    static volatile sig_atomic_t seen = 0;
    ::signal(SIGUSR1, SIG_IGN);  // unrelated
    struct sigaction sa {};
    sa.sa_handler = [](int) { seen = 1; };
    ::sigaction(SIGINT, &sa, nullptr);
    auto f = OutputFile::create(p("out"));
    if (!f) ::_exit(3);
    ::raise(SIGINT);
    ::_exit(seen ? 0 : 5);  // the host's handler ran and the process went on
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A FIFO was waited on forever (a signing key, a public key, a --shapes list, an edited CUDA
// source given as one), /dev/zero read until memory ran out, a directory failed with a stream
// library's message.
TEST_F(OutputFileTest, InputsAreReadOnlyWhenTheyAreRegularFiles) {
  put(p("key"), std::string("k\0y", 3));
  auto key = read_file(p("key"));
  ASSERT_TRUE(key) << key.error().message;
  EXPECT_EQ(*key, std::string("k\0y", 3));
  EXPECT_TRUE(check_input_file(p("key")));
  auto empty = (put(p("empty"), ""), read_file(p("empty")));
  ASSERT_TRUE(empty);
  EXPECT_EQ(*empty, "");
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0600), 0);
  fs::create_directory(p("dir"));
  const std::vector<std::pair<std::string, std::string>> refused = {
      {p("fifo"), p("fifo") + ": is a FIFO; optjit reads only regular files"},
      {"/dev/zero", "/dev/zero: is a character device; optjit reads only regular files"},
      {p("dir"), p("dir") + ": is a directory; optjit reads only regular files"},
      {p("none"), p("none") + ": cannot open (No such file or directory)"},
  };
  for (const auto& [path, message] : refused) {
    auto r = read_file(path);
    ASSERT_FALSE(r) << path;
    EXPECT_EQ(r.error().message, message);
    auto c = check_input_file(path);
    ASSERT_FALSE(c) << path;
    EXPECT_EQ(c.error().message, message);
  }
  // At most max_bytes: what is larger is refused by its size, unread.
  put(p("big"), std::string(1000, 'x'));
  EXPECT_TRUE(read_file(p("big"), 1000));
  auto big = read_file(p("big"), 999);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().message, p("big") + ": is 1000 bytes, more than the 999 read here");
  // A file whose size says 0 but that holds text (/proc) is read whole.
  auto status = read_file("/proc/self/status");
  ASSERT_TRUE(status) << status.error().message;
  EXPECT_NE(status->find("Pid:"), std::string::npos);
  auto capped = read_file("/proc/self/status", 16);
  ASSERT_FALSE(capped);
  EXPECT_EQ(capped.error().message,
            "/proc/self/status: grew past the 16 bytes read here while it was read");
}

}  // namespace
}  // namespace optjit::support
