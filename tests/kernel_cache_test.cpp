#include "cache/kernel_cache.h"

#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "test_dir.h"

namespace optjit::cache {
namespace {

namespace fs = std::filesystem;

class CacheTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir("cache"); }
  void TearDown() override { test::remove_test_dir(dir_); }
  std::string dir(const std::string& sub = "user") const { return (dir_ / sub).string(); }
  static KernelEntry entry(const std::string& program, const std::string& text,
                           const std::string& fp = "fp-a") {
    KernelEntry e;
    e.key = {fp, program, "block=256"};
    e.format = "test";
    e.payload.assign(text.begin(), text.end());
    e.compile_seconds = 0.1;
    return e;
  }
  static std::string text(const std::optional<KernelEntry>& e) {
    return e ? std::string(e->payload.begin(), e->payload.end()) : "<miss>";
  }
  // Raw SQL on a cache file, as a user with the sqlite3 shell would.
  static void sql(const std::string& path, const std::string& statement,
                  const std::vector<uint8_t>* blob = nullptr) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* s = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, statement.c_str(), -1, &s, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    if (blob)
      sqlite3_bind_blob(s, 1, blob->data(), static_cast<int>(blob->size()), SQLITE_TRANSIENT);
    EXPECT_EQ(sqlite3_step(s), SQLITE_DONE) << sqlite3_errmsg(db);
    sqlite3_finalize(s);
    sqlite3_close(db);
  }
  fs::path dir_;
};

TEST_F(CacheTest, StoresLoadsAndTheFirstWriterWins) {
  auto c = KernelCache::open({dir()});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_FALSE((*c)->get(entry("p1", "").key));
  ASSERT_TRUE((*c)->put(entry("p1", "first")));
  ASSERT_TRUE((*c)->put(entry("p1", "second")));
  EXPECT_EQ(text((*c)->get(entry("p1", "").key)), "first");
  auto again = KernelCache::open({dir()});  // another process, later
  ASSERT_TRUE(again);
  EXPECT_EQ(text((*again)->get(entry("p1", "").key)), "first");
  EXPECT_EQ((*again)->stats().kernels, 1);
  EXPECT_EQ((*again)->stats().hits, 1);
}

TEST_F(CacheTest, UserRowsWinOverShippedDatabasesWhichStayReadOnly) {
  {
    auto shipped = KernelCache::open({dir("ship")});
    ASSERT_TRUE(shipped);
    ASSERT_TRUE((*shipped)->put(entry("p1", "shipped p1")));
    ASSERT_TRUE((*shipped)->put(entry("p2", "shipped p2")));
    ASSERT_TRUE((*shipped)->prune(-1, -1));  // checkpoint the WAL into the file
  }
  const std::string ship_db = dir("ship") + "/kernels.sqlite";
  auto before = fs::last_write_time(ship_db);
  auto c = KernelCache::open({.dir = dir(), .shipped = {ship_db}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(text((*c)->get(entry("p2", "").key)), "shipped p2");
  ASSERT_TRUE((*c)->put(entry("p1", "user p1")));
  EXPECT_EQ(text((*c)->get(entry("p1", "").key)), "user p1");
  EXPECT_EQ((*c)->list().size(), 3u);
  EXPECT_EQ(fs::last_write_time(ship_db), before);
}

// Paths with characters that SQLite's URIs give meaning to: a shipped layer in such a
// directory "cannot be opened; ignored".
TEST_F(CacheTest, ShippedDatabasesInAnyPathAreRead) {
  const std::string odd = dir("we?ird#dir%41");
  {
    auto shipped = KernelCache::open({odd});
    ASSERT_TRUE(shipped) << shipped.error().message;
    ASSERT_TRUE((*shipped)->put(entry("p1", "shipped p1")));
    ASSERT_TRUE((*shipped)->prune(-1, -1));  // checkpoint the WAL into the file
  }
  auto c = KernelCache::open({.dir = dir(), .shipped = {odd + "/kernels.sqlite"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE((*c)->warnings().empty()) << (*c)->warnings()[0];
  EXPECT_EQ(text((*c)->get(entry("p1", "").key)), "shipped p1");
}

// A cache this process may read but not write (a read-only file system, a home directory
// mounted read-only, a cache baked into an image run as another user) was not used at all
// ("attempt to write a readonly database"; the optimizer ran without it). Its kernels are read
// now; what is compiled is not stored, said as such; nothing is written to it or beside it.
// Here as another user (root drops to nobody; anyone else loses write permission).
TEST_F(CacheTest, AReadOnlyCacheIsReadAndNeverWritten) {
  {
    auto c = KernelCache::open({dir()});
    ASSERT_TRUE(c);
    ASSERT_TRUE((*c)->put(entry("p1", "first")));
    ASSERT_TRUE((*c)->put_decision("prog", 12, "cpu|x", "threads=2"));
    ASSERT_TRUE((*c)->prune(-1, -1));  // checkpoint: one file, as a cache at rest is
  }
  const std::string db = dir() + "/kernels.sqlite";
  const auto before = fs::last_write_time(db);
  const auto size = fs::file_size(db);
  fs::permissions(dir_, fs::perms::others_read | fs::perms::others_exec, fs::perm_options::add);
  fs::permissions(dir(), fs::perms::owner_write, fs::perm_options::remove);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(20);
    auto c = KernelCache::open({dir()});
    if (!c) {
      std::fprintf(stderr, "open: %s\n", c.error().message.c_str());
      ::_exit(1);
    }
    if (!(*c)->read_only() || text((*c)->get(entry("p1", "").key)) != "first") ::_exit(2);
    if ((*c)->get_decision("prog", 12, "cpu|x") != "threads=2") ::_exit(3);
    auto built = cached_compile(c->get(), entry("p2", "").key, "test", "p2", [] {
      return Expected<Compiled>(Compiled{{1, 2, 3}});
    });
    const std::string ro = "kernel cache " + db + " is read-only";
    if (!built || built->payload.size() != 3 || built->not_stored != ro) ::_exit(4);
    if ((*c)->warnings() !=
        std::vector<std::string>{ro + "; kernels compiled now are not stored and will be "
                                      "compiled again"})
      ::_exit(5);
    if ((*c)->put_decision("prog", 13, "cpu|x", "threads=1").error().message != ro) ::_exit(6);
    auto pruned = (*c)->prune(0, 0);
    if (pruned || pruned.error().message != ro + ": nothing can be pruned") ::_exit(7);
    if (!(*c)->verify().empty() || (*c)->stats().kernels != 1) ::_exit(8);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  fs::permissions(dir(), fs::perms::owner_write, fs::perm_options::add);
  EXPECT_EQ(fs::last_write_time(db), before);
  EXPECT_EQ(fs::file_size(db), size);
  EXPECT_FALSE(fs::exists(db + "-wal"));
  EXPECT_FALSE(fs::exists(db + "-shm"));
  // Kernels are code: never read from another user's cache (one in a shared /tmp). Only root
  // can give the file to another user (CI runs as root).
  if (::geteuid() != 0) return;
  ASSERT_EQ(::chown(db.c_str(), 12345, 12345), 0);
  fs::permissions(dir(), fs::perms::owner_write, fs::perm_options::remove);
  pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(20);
    auto c = KernelCache::open({dir()});
    ::_exit(!c && c.error().message == "kernel cache " + db +
                                           " belongs to another user (uid 12345) and this process "
                                           "may not write it; set OPTJIT_CACHE_DIR to a cache of "
                                           "its own"
                ? 0
                : 1);
  }
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  fs::permissions(dir(), fs::perms::owner_write, fs::perm_options::add);
}

TEST_F(CacheTest, AFileThatIsNotADatabaseIsMovedAsideAndReplaced) {
  fs::create_directories(dir());
  std::ofstream(dir() + "/kernels.sqlite") << "this is not a database, but it is somebody's file";
  auto c = KernelCache::open({dir()});
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_EQ((*c)->warnings().size(), 1u);
  EXPECT_NE((*c)->warnings()[0].find("was unusable"), std::string::npos) << (*c)->warnings()[0];
  ASSERT_TRUE((*c)->put(entry("p1", "x")));
  EXPECT_EQ(text((*c)->get(entry("p1", "").key)), "x");
  int aside = 0;
  for (auto& f : fs::directory_iterator(dir()))
    if (f.path().filename().string().find(".corrupt-") != std::string::npos) {
      ++aside;
      std::ifstream in(f.path());
      std::string kept((std::istreambuf_iterator<char>(in)), {});
      EXPECT_EQ(kept,
                "this is not a database, but it is somebody's file");  // nothing on disk is lost
    }
  EXPECT_EQ(aside, 1);
}

// SQLite blocks forever reading a FIFO and fails with "disk I/O error" on a directory: what is
// not a regular file is named, and never moved aside (it is not a damaged cache, and not ours).
TEST_F(CacheTest, WhatIsNotARegularFileIsNamedNotOpened) {
  // Opens on another thread, so that a hang fails the test instead of stopping the suite.
  auto open_within =
      [](CacheOptions options) -> std::optional<Expected<std::unique_ptr<KernelCache>>> {
    auto result = std::make_shared<std::promise<Expected<std::unique_ptr<KernelCache>>>>();
    auto done = result->get_future();
    std::thread([result, options] { result->set_value(KernelCache::open(options)); }).detach();
    if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return std::nullopt;
    return done.get();
  };
  fs::create_directories(dir());
  ASSERT_EQ(::mkfifo((dir() + "/kernels.sqlite").c_str(), 0600), 0);
  auto fifo = open_within({dir()});
  ASSERT_TRUE(fifo) << "opening a cache that is a FIFO hung";
  ASSERT_FALSE(*fifo);
  EXPECT_EQ(fifo->error().message,
            "kernel cache " + dir() +
                "/kernels.sqlite: a FIFO, not a database file (the cache is one SQLite file)");
  EXPECT_EQ(fs::status(dir() + "/kernels.sqlite").type(), fs::file_type::fifo);

  fs::create_directories(dir("d") + "/kernels.sqlite");
  auto directory = open_within({dir("d")});
  ASSERT_TRUE(directory);
  ASSERT_FALSE(*directory);
  EXPECT_NE(directory->error().message.find("kernels.sqlite: a directory, not a database file"),
            std::string::npos)
      << directory->error().message;
  EXPECT_TRUE(fs::is_directory(dir("d") + "/kernels.sqlite"));

  // A shipped database that is a FIFO is skipped with a warning, as a damaged one is.
  const std::string ship = dir_.string() + "/shipped.sqlite";
  ASSERT_EQ(::mkfifo(ship.c_str(), 0600), 0);
  auto shipped = open_within({.dir = dir("u"), .shipped = {ship}});
  ASSERT_TRUE(shipped) << "opening a shipped database that is a FIFO hung";
  ASSERT_TRUE(*shipped) << (*shipped).error().message;
  ASSERT_EQ((**shipped)->warnings().size(), 1u);
  EXPECT_EQ((**shipped)->warnings()[0], "shipped kernel database " + ship + ": a FIFO; ignored");
  ASSERT_TRUE((**shipped)->put(entry("p1", "x")));
  EXPECT_EQ(text((**shipped)->get(entry("p1", "").key)), "x");
}

TEST_F(CacheTest, TruncatedAndBitFlippedFilesAreSurvivedAndNeverLoaded) {
  const std::string big(200000, 'k');
  {
    auto c = KernelCache::open({dir()});
    ASSERT_TRUE(c);
    for (int i = 0; i < 20; ++i)
      ASSERT_TRUE((*c)->put(entry("p" + std::to_string(i), big + std::to_string(i))));
    ASSERT_TRUE((*c)->prune(-1, -1));
  }
  const std::string db = dir() + "/kernels.sqlite";
  fs::copy_file(db, dir_ / "pristine.sqlite");
  auto check_never_wrong = [&](const char* what) {
    auto c = KernelCache::open({dir()});
    ASSERT_TRUE(c) << what << ": " << c.error().message;
    for (int i = 0; i < 20; ++i) {
      auto e = (*c)->get(entry("p" + std::to_string(i), "").key);
      if (e) {
        EXPECT_EQ(text(e), big + std::to_string(i)) << what << ": a damaged kernel was loaded";
      }
    }
    ASSERT_TRUE((*c)->put(entry("fresh", "still works")));
    EXPECT_EQ(text((*c)->get(entry("fresh", "").key)), "still works") << what;
  };
  fs::resize_file(db, fs::file_size(db) / 2);
  check_never_wrong("truncated");
  std::mt19937 rng(7);
  for (int round = 0; round < 5; ++round) {
    fs::remove(db);
    fs::copy_file(dir_ / "pristine.sqlite", db);
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<int64_t>(fs::file_size(db));
    for (int k = 0; k < 64; ++k) {
      f.seekg(std::uniform_int_distribution<int64_t>(100, size - 1)(rng));
      char byte = 0;
      f.read(&byte, 1);
      f.seekp(-1, std::ios::cur);
      byte = static_cast<char>(byte ^ (1 << (rng() % 8)));
      f.write(&byte, 1);
    }
    f.close();
    check_never_wrong("bit-flipped");
  }
}

// Damages `table`'s root page in the database at `db` (its type byte: none of B-tree's four) and
// returns the file's bytes after.
std::string damage_root_page(const std::string& db, const char* table) {
  int64_t root = 0, page = 0;
  sqlite3* h = nullptr;
  EXPECT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  sqlite3_prepare_v2(h, "SELECT rootpage FROM sqlite_master WHERE name = ?1", -1, &q, nullptr);
  sqlite3_bind_text(q, 1, table, -1, SQLITE_STATIC);
  if (sqlite3_step(q) == SQLITE_ROW) root = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  sqlite3_prepare_v2(h, "PRAGMA page_size", -1, &q, nullptr);
  if (sqlite3_step(q) == SQLITE_ROW) page = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  sqlite3_close(h);
  EXPECT_GT(root, 1) << table;
  {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((root - 1) * page);
    f.put(static_cast<char>(0x7f));
  }
  std::ifstream in(db, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Opening no longer reads the whole file (SQLite's quick_check did, at every open): damage
// where opening does not look, a table's root page, is met by the first statement that reads
// it. The file is moved aside whole, and what follows is stored in a new one.
TEST_F(CacheTest, DamageTheOpenDidNotSeeIsMovedAsideWhenALookupMeetsIt) {
  const std::string db = dir() + "/kernels.sqlite";
  for (const char* table : {"kernels", "tuning_decisions"}) {
    SCOPED_TRACE(table);
    fs::remove_all(dir());
    {
      auto c = KernelCache::open({dir()});
      ASSERT_TRUE(c);
      for (int i = 0; i < 200; ++i) {
        ASSERT_TRUE((*c)->put(entry("p" + std::to_string(i), "kernel " + std::to_string(i))));
        ASSERT_TRUE((*c)->put_decision("p" + std::to_string(i), 1, "cpu|x", "threads=2", true));
      }
      ASSERT_TRUE((*c)->prune(-1, -1));  // checkpointed: all of it in the file
    }
    const std::string damaged = damage_root_page(db, table);
    auto c = KernelCache::open({dir()});
    ASSERT_TRUE(c) << c.error().message;
    if (std::string(table) == "kernels") {
      EXPECT_FALSE((*c)->get(entry("p7", "").key));
      ASSERT_TRUE((*c)->put(entry("fresh", "still works")));
      EXPECT_EQ(text((*c)->get(entry("fresh", "").key)), "still works");
    } else {
      EXPECT_FALSE((*c)->get_decision("p7", 1, "cpu|x", nullptr));
      ASSERT_TRUE((*c)->put_decision("fresh", 1, "cpu|x", "threads=1", true));
      EXPECT_EQ((*c)->get_decision("fresh", 1, "cpu|x", nullptr), "threads=1");
    }
    ASSERT_FALSE((*c)->warnings().empty());
    const std::string& w = (*c)->warnings().back();
    EXPECT_NE(w.find("database disk image is malformed"), std::string::npos) << w;
    EXPECT_NE(w.find("moved to " + db + ".corrupt-"), std::string::npos) << w;
    int aside = 0;
    for (auto& f : fs::directory_iterator(dir()))
      if (f.path().filename().string().find(".corrupt-") != std::string::npos) {
        ++aside;
        std::ifstream in(f.path(), std::ios::binary);
        EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), damaged)
            << "nothing on disk is lost";
      }
    EXPECT_EQ(aside, 1);
  }
}

TEST_F(CacheTest, ABlobForAnotherDeviceInsertedByHandIsRejected) {
  auto c = KernelCache::open({dir()});
  ASSERT_TRUE(c);
  ASSERT_TRUE((*c)->put(entry("p1", "ours")));
  // Replace our row's blob by one built for device fp-b, with checksums that fit it.
  KernelEntry foreign = entry("p1", "theirs", "fp-b");
  std::vector<uint8_t> blob = wrap(foreign);
  sql(dir() + "/kernels.sqlite", "UPDATE kernels SET blob = ?1", &blob);
  auto e = (*c)->get(entry("p1", "").key);
  EXPECT_FALSE(e) << text(e);
  ASSERT_FALSE((*c)->warnings().empty());
  EXPECT_NE((*c)->warnings().back().find("built for another device"), std::string::npos)
      << (*c)->warnings().back();
  EXPECT_EQ((*c)->stats().kernels, 0);  // removed from the user layer
}

TEST_F(CacheTest, AnotherSchemaVersionIsMovedAside) {
  {
    auto c = KernelCache::open({dir()});
    ASSERT_TRUE(c);
    ASSERT_TRUE((*c)->put(entry("p1", "v1")));
  }
  sql(dir() + "/kernels.sqlite", "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  auto c = KernelCache::open({dir()});
  ASSERT_TRUE(c);
  ASSERT_EQ((*c)->warnings().size(), 1u);
  EXPECT_NE((*c)->warnings()[0].find("schema version 99 (this optjit uses 1)"), std::string::npos)
      << (*c)->warnings()[0];
  EXPECT_FALSE((*c)->get(entry("p1", "").key));
}

TEST_F(CacheTest, AMissSaysWhichPartOfTheKeyDiffered) {
  auto c = KernelCache::open({dir()});
  ASSERT_TRUE(c);
  EXPECT_EQ((*c)->explain_miss(entry("p1", "").key), "the cache holds no kernels");
  ASSERT_TRUE((*c)->put(entry("p1", "x")));
  EXPECT_EQ((*c)->explain_miss(entry("p1", "", "fp-new").key),
            "nearest cached kernel differs in device fingerprint (fp-a cached, fp-new here)");
  EXPECT_EQ((*c)->explain_miss(entry("p2", "").key),
            "nearest cached kernel differs in program (p1 cached, p2 here)");
}

TEST_F(CacheTest, PrunesBySize) {
  auto c = KernelCache::open({dir()});
  ASSERT_TRUE(c);
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE((*c)->put(entry("p" + std::to_string(i), std::string(1000, 'x'))));
  auto removed = (*c)->prune(-1, 5000);
  ASSERT_TRUE(removed);
  EXPECT_GE(*removed, 5);
  EXPECT_LE((*c)->stats().bytes, 5000);
  EXPECT_TRUE((*c)->verify().empty());
}

// A database held by another process is waited for, never mistaken for a damaged one.
TEST_F(CacheTest, ALockedDatabaseIsWaitedForNotMovedAside) {
  {
    auto c = KernelCache::open({dir()});
    ASSERT_TRUE(c);
    ASSERT_TRUE((*c)->put(entry("p1", "kept")));
  }
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open((dir() + "/kernels.sqlite").c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN EXCLUSIVE;", nullptr, nullptr, nullptr), SQLITE_OK);
  std::thread release([holder] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    sqlite3_exec(holder, "COMMIT;", nullptr, nullptr, nullptr);
  });
  auto c = KernelCache::open({dir()});
  release.join();
  sqlite3_close(holder);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE((*c)->warnings().empty()) << (*c)->warnings()[0];
  EXPECT_EQ(text((*c)->get(entry("p1", "").key)), "kept");
  for (auto& f : fs::directory_iterator(dir()))
    EXPECT_EQ(f.path().filename().string().find(".corrupt-"), std::string::npos);
}

// A writer killed mid-stream (SIGKILL, so nothing is flushed or closed) leaves a database that
// opens, verifies, and holds only whole rows.
TEST_F(CacheTest, AWriterKilledMidWriteLeavesOnlyWholeRows) {
  const std::string big(100000, 'z');
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto c = KernelCache::open({dir()});
    if (!c) ::_exit(10);
    for (int k = 0;; ++k) (void)(*c)->put(entry("p" + std::to_string(k), big + std::to_string(k)));
  }
  // Let it write for a while, then kill it wherever it is.
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::error_code ec;
    if (fs::exists(dir() + "/kernels.sqlite-wal", ec) &&
        fs::file_size(dir() + "/kernels.sqlite-wal", ec) > 2000000)
      break;
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  auto c = KernelCache::open({dir()});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE((*c)->warnings().empty()) << (*c)->warnings()[0];
  EXPECT_TRUE((*c)->verify().empty());
  const auto rows = (*c)->list();
  EXPECT_GT(rows.size(), 0u);
  for (const auto& e : rows) {
    int k = std::stoi(e.key.program.substr(1));
    EXPECT_EQ(text((*c)->get(e.key)), big + std::to_string(k));
  }
}

// A full disk (here a file size limit, which SQLite meets the same way): a cache whose schema
// cannot be written is an error at open (it opened as an empty database, whose every query then
// failed: "0 kernels", "no such table"), and a kernel that cannot be stored is compiled, used
// and said once in warnings(), not claimed stored (a cache meant to ship warm shipped cold).
TEST_F(CacheTest, AFullDiskIsAnErrorAtOpenAndAKernelNotStoredIsAWarning) {
  auto with_file_limit = [&](rlim_t bytes, const std::function<int()>& body) {
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      std::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead
      rlimit r{bytes, bytes};
      ::setrlimit(RLIMIT_FSIZE, &r);
      ::_exit(body());
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
  };
  // Room for SQLite's 32 KiB shared-memory index, not for the schema's frames in the log: the
  // commit is what fails.
  EXPECT_EQ(with_file_limit(32768,
                            [&] {
                              auto c = KernelCache::open({dir()});
                              if (c) return 1;
                              const std::string want =
                                  "kernel cache " + dir() + "/kernels.sqlite: ";
                              if (c.error().message.rfind(want, 0) != 0) {
                                std::fprintf(stderr, "unexpected: %s\n", c.error().message.c_str());
                                return 2;
                              }
                              return 0;
                            }),
            0);
  ASSERT_TRUE(KernelCache::open({dir()}));  // the schema, written with room to spare
  // Room for the database as it is, not for a kernel of 100,000 bytes.
  const auto size = fs::file_size(dir() + "/kernels.sqlite");
  EXPECT_EQ(
      with_file_limit(size + 4096,
                      [&] {
                        auto c = KernelCache::open({dir()});
                        if (!c) {
                          std::fprintf(stderr, "open: %s\n", c.error().message.c_str());
                          return 1;
                        }
                        int compiles = 0;
                        auto compile = [&]() -> Expected<Compiled> {
                          ++compiles;
                          return Compiled{std::vector<uint8_t>(100000, 7)};
                        };
                        for (const char* program : {"p1", "p2"}) {
                          auto built = cached_compile(c->get(), entry(program, "").key, "test", "p",
                                                      compile);
                          if (!built || built->payload.size() != 100000 || built->from_cache)
                            return 2;
                          if (built->not_stored.empty()) return 3;
                        }
                        const auto& w = (*c)->warnings();
                        if (compiles != 2 || w.size() != 1 ||
                            w[0].find("kernels compiled now are not stored") == std::string::npos) {
                          for (const auto& line : w)
                            std::fprintf(stderr, "warning: %s\n", line.c_str());
                          return 4;
                        }
                        return 0;
                      }),
      0);
  auto c = KernelCache::open({dir()});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ((*c)->stats().kernels, 0);
  EXPECT_TRUE((*c)->verify().empty());
}

// Eight processes insert the same 200 keys at once, each with its own bytes: no error, no
// lost row, every process reads back the same (first) bytes, and SQLite's check passes.
TEST_F(CacheTest, EightProcessesConvergeOnOneDatabase) {
  constexpr int kProcs = 8, kKeys = 200;
  std::vector<pid_t> pids;
  int pipes[kProcs][2];
  for (int p = 0; p < kProcs; ++p) {
    ASSERT_EQ(::pipe(pipes[p]), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      auto c = KernelCache::open({dir()});
      if (!c) ::_exit(10);
      for (int k = 0; k < kKeys; ++k)
        if (!(*c)->put(entry("p" + std::to_string(k),
                             "from process " + std::to_string(p) + " key " + std::to_string(k))))
          code = 11;
      std::string seen;
      for (int k = 0; k < kKeys; ++k)
        seen += text((*c)->get(entry("p" + std::to_string(k), "").key)) + "\n";
      uint64_t h = std::hash<std::string>{}(seen);
      if (::write(pipes[p][1], &h, sizeof(h)) != sizeof(h)) code = 12;
      ::_exit(code);
    }
    ::close(
        pipes[p][1]);  // only the child writes: an early exit then reads as end of file, not a hang
    pids.push_back(pid);
  }
  std::vector<uint64_t> hashes;
  for (int p = 0; p < kProcs; ++p) {
    int status = 0;
    ::waitpid(pids[p], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "process " << p << " status " << status;
    uint64_t h = 0;
    EXPECT_EQ(::read(pipes[p][0], &h, sizeof(h)), static_cast<ssize_t>(sizeof(h)))
        << "process " << p;
    hashes.push_back(h);
    ::close(pipes[p][0]);
  }
  for (uint64_t h : hashes) EXPECT_EQ(h, hashes[0]) << "processes saw different bytes";
  auto c = KernelCache::open({dir()});
  ASSERT_TRUE(c);
  EXPECT_EQ((*c)->stats().kernels, kKeys);
  EXPECT_TRUE((*c)->warnings().empty());
  EXPECT_TRUE((*c)->verify().empty()) << (*c)->verify()[0];
}

}  // namespace
}  // namespace optjit::cache
