#include "cache/kernel_cache.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include <fmt/ranges.h>

#include "support/output_file.h"

namespace optjit::cache {

namespace fs = std::filesystem;

namespace {

int64_t now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string checksum(const uint8_t* p, size_t n) {
  return fmt::format("{:016x}", XXH3_64bits(p, n));
}

// Busy handler: back off exponentially (1 ms .. 100 ms), up to about 30 s in all.
int backoff(void*, int tries) {
  if (tries > 400) return 0;
  int ms = std::min(100, 1 << std::min(tries, 7));
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return 1;
}

Status exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "unknown error";
    sqlite3_free(err);
    return make_error("{}", m);
  }
  return Status::Ok();
}

// A prepared statement that finalizes itself.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  Stmt(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &s, nullptr); }
  ~Stmt() { sqlite3_finalize(s); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  void finalize() { sqlite3_finalize(s), s = nullptr; }
  explicit operator bool() const { return s != nullptr; }
  void text(int i, const std::string& v) {
    sqlite3_bind_text(s, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void blob(int i, const std::vector<uint8_t>& v) {
    sqlite3_bind_blob(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void real(int i, double v) { sqlite3_bind_double(s, i, v); }
  void integer(int i, int64_t v) { sqlite3_bind_int64(s, i, v); }
  std::string col_text(int i) {
    auto* p = sqlite3_column_text(s, i);
    return p ? reinterpret_cast<const char*>(p) : "";
  }
  std::vector<uint8_t> col_blob(int i) {
    auto* p = static_cast<const uint8_t*>(sqlite3_column_blob(s, i));
    return p ? std::vector<uint8_t>(p, p + sqlite3_column_bytes(s, i)) : std::vector<uint8_t>{};
  }
};

constexpr const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kernels(
  id TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, program TEXT NOT NULL, variant TEXT NOT NULL,
  format TEXT NOT NULL, blob BLOB NOT NULL, checksum TEXT NOT NULL, resources TEXT NOT NULL,
  compile_seconds REAL NOT NULL, created INTEGER NOT NULL, last_used INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tuning_measurements(
  program TEXT NOT NULL, size_bucket INTEGER NOT NULL, performance TEXT NOT NULL, config TEXT NOT NULL,
  seconds REAL NOT NULL, repetitions INTEGER NOT NULL, created INTEGER NOT NULL,
  PRIMARY KEY(program, size_bucket, performance, config));
CREATE TABLE IF NOT EXISTS tuning_decisions(
  program TEXT NOT NULL, size_bucket INTEGER NOT NULL, performance TEXT NOT NULL, config TEXT NOT NULL,
  created INTEGER NOT NULL, PRIMARY KEY(program, size_bucket, performance));
)";

// An SQLite URI that opens `path` read-only and immutable (no locks, no log: nothing is
// written, not even beside it), with the characters a URI gives meaning escaped: a path with
// '?', '#' or '%' in it could not be opened.
std::string read_only_uri(const std::string& path) {
  std::string uri = "file:";
  for (char ch : path) {
    if (ch == '?' || ch == '#' || ch == '%')
      uri += fmt::format("%{:02X}", static_cast<unsigned char>(ch));
    else
      uri += ch;
  }
  return uri + "?mode=ro&immutable=1";
}

}  // namespace

std::string KernelKey::id() const { return fmt::format("{}/{}/{}", fingerprint, program, variant); }

std::string default_cache_dir() {
  if (const char* d = std::getenv("OPTJIT_CACHE_DIR"); d && *d) return d;
  // A relative XDG_CACHE_HOME is invalid and to be ignored (the XDG Base Directory spec): it
  // would put the cache wherever the process happens to start.
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/')
    return std::string(x) + "/optjit";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/optjit";
  std::error_code ec;  // (temp_directory_path throws where TMPDIR names no directory)
  const fs::path tmp = fs::temp_directory_path(ec);
  // One per user: the temporary directory is shared, and kernels are code.
  return fmt::format("{}/optjit-cache-{}", (ec ? fs::path("/tmp") : tmp).string(), ::geteuid());
}

std::vector<uint8_t> wrap(const KernelEntry& e) {
  std::string head = fmt::format("OPTJITK1\n{}\n{}\n{}\n", e.key.fingerprint, e.format,
                                 checksum(e.payload.data(), e.payload.size()));
  std::vector<uint8_t> out(head.begin(), head.end());
  out.insert(out.end(), e.payload.begin(), e.payload.end());
  return out;
}

Expected<KernelEntry> unwrap(const std::vector<uint8_t>& blob, const std::string& want) {
  auto line = [&](size_t& pos) -> std::optional<std::string> {
    auto nl = std::find(blob.begin() + static_cast<std::ptrdiff_t>(pos), blob.end(), '\n');
    if (nl == blob.end()) return std::nullopt;
    std::string s(blob.begin() + static_cast<std::ptrdiff_t>(pos), nl);
    pos = static_cast<size_t>(nl - blob.begin()) + 1;
    return s;
  };
  size_t pos = 0;
  auto magic = line(pos), fp = line(pos), format = line(pos), sum = line(pos);
  if (!magic || *magic != "OPTJITK1" || !fp || !format || !sum)
    return make_error("not an optjit kernel blob");
  if (*fp != want)
    return make_error("built for another device (fingerprint {}, this device {})", *fp, want);
  KernelEntry e;
  e.key.fingerprint = *fp;
  e.format = *format;
  e.payload.assign(blob.begin() + static_cast<std::ptrdiff_t>(pos), blob.end());
  if (checksum(e.payload.data(), e.payload.size()) != *sum)
    return make_error("checksum mismatch (damaged)");
  return e;
}

KernelCache::~KernelCache() {
  if (db_) sqlite3_close(db_);
  for (auto& [p, db] : shipped_) sqlite3_close(db);
}

namespace {

// What is at `path` when it exists and is not a regular file (SQLite would block forever
// reading a FIFO, and fail with an I/O error on a directory); nothing for a regular file or
// none at all (the user database is then created).
std::optional<std::string> not_a_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return std::nullopt;
  return support::kind_of(st.st_mode);
}

}  // namespace

Expected<std::unique_ptr<KernelCache>> KernelCache::open(CacheOptions options) {
  std::unique_ptr<KernelCache> c(new KernelCache());
  c->options_ = options;
  std::string dir = options.dir.empty() ? default_cache_dir() : options.dir;
  if (!options.file.empty()) dir = fs::path(options.file).parent_path().string();
  std::error_code ec;
  if (!dir.empty()) fs::create_directories(dir, ec);
  if (ec) return make_error("kernel cache: cannot create {} ({})", dir, ec.message());
  c->path_ = options.file.empty() ? dir + "/kernels.sqlite" : options.file;
  if (options.shipped.empty())
    if (const char* env = std::getenv("OPTJIT_CACHE_SHIPPED"); env && *env) {
      std::string list = env;
      for (size_t pos = 0; pos <= list.size();) {
        size_t colon = list.find(':', pos);
        std::string one =
            list.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
        if (!one.empty()) options.shipped.push_back(one);
        if (colon == std::string::npos) break;
        pos = colon + 1;
      }
      c->options_.shipped = options.shipped;
    }
  if (auto what = not_a_file(c->path_))
    return make_error("kernel cache {}: {}, not a database file (the cache is one SQLite file)",
                      c->path_, *what);
  OPTJIT_TRY(c->open_user());
  for (const auto& s : options.shipped) {
    if (auto what = not_a_file(s)) {
      c->warnings_.push_back(fmt::format("shipped kernel database {}: {}; ignored", s, *what));
      continue;
    }
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(read_only_uri(s).c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
                        nullptr) != SQLITE_OK) {
      c->warnings_.push_back(
          fmt::format("shipped kernel database {} cannot be opened; ignored", s));
      sqlite3_close(db);
      continue;
    }
    bool usable;
    {
      Stmt v(db, "SELECT value FROM meta WHERE key = 'schema_version'");
      usable =
          v && sqlite3_step(v.s) == SQLITE_ROW && v.col_text(0) == std::to_string(kSchemaVersion);
    }
    if (!usable) {
      c->warnings_.push_back(
          fmt::format("shipped kernel database {} is damaged or of another version; ignored", s));
      sqlite3_close(db);
      continue;
    }
    c->shipped_.emplace_back(s, db);
  }
  return c;
}

namespace {

// Only these mean the file is not a usable database; anything else (busy, locked, I/O,
// permissions) says nothing about the file and must never cause it to be moved aside.
bool damaged(int code) { return (code & 0xff) == SQLITE_NOTADB || (code & 0xff) == SQLITE_CORRUPT; }
bool contended(int code) { return (code & 0xff) == SQLITE_BUSY || (code & 0xff) == SQLITE_LOCKED; }

// A database file that exists and that this process may read but not write, or whose directory
// it may not write (SQLite's log and index files go beside it).
bool readable_not_writable(const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0) return false;
  const std::string dir =
      fs::path(path).has_parent_path() ? fs::path(path).parent_path().string() : std::string(".");
  return ::access(path.c_str(), W_OK) != 0 || ::access(dir.c_str(), W_OK) != 0;
}

}  // namespace

// The user database when it can only be read: its kernels and decisions are used like a
// shipped layer's, and every write (a new kernel, a decision, a removal) is refused, which the
// compile protocol reports as a kernel not stored.
Status KernelCache::open_user_read_only() {
  // Kernels are code this process will run: only from a file of its own user or of root (a
  // cache baked into an image), never from another user's.
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && st.st_uid != ::geteuid() && st.st_uid != 0)
    return make_error(
        "kernel cache {} belongs to another user (uid {}) and this process may not write it; "
        "set OPTJIT_CACHE_DIR to a cache of its own",
        path_, st.st_uid);
  if (sqlite3_open_v2(read_only_uri(path_).c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
                      nullptr) != SQLITE_OK) {
    std::string why = sqlite3_errmsg(db_);
    sqlite3_close(db_), db_ = nullptr;
    return make_error("kernel cache {} is read-only, and cannot be read either: {}", path_, why);
  }
  std::string version;
  {
    Stmt v(db_, "SELECT value FROM meta WHERE key = 'schema_version'");
    if (v && sqlite3_step(v.s) == SQLITE_ROW) version = v.col_text(0);
  }
  if (version != std::to_string(kSchemaVersion)) {
    sqlite3_close(db_), db_ = nullptr;
    return make_error("kernel cache {} is read-only and {}", path_,
                      version.empty() ? "not a kernel database (or damaged)"
                                      : fmt::format("of schema version {} (this optjit uses {})",
                                                    version, kSchemaVersion));
  }
  read_only_ = true;
  return Status::Ok();
}

Status KernelCache::open_user() {
  // A cache this process may read but not write (a read-only file system, a home directory
  // mounted read-only on compute nodes, a cache baked into an image run as another user) was
  // not used at all ("attempt to write a readonly database"): its kernels are read now.
  if (readable_not_writable(path_)) return open_user_read_only();
  int busy_rounds = 0;
  for (int attempt = 0; attempt < 2;) {
    if (db_) sqlite3_close(db_), db_ = nullptr;
    std::string problem;
    int code = SQLITE_OK;
    bool bad_file = false;
    auto step = [&](const char* sql) {
      if (code != SQLITE_OK) return;
      char* err = nullptr;
      code = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
      if (code != SQLITE_OK) problem = err ? err : sqlite3_errstr(code);
      sqlite3_free(err);
    };
    code = sqlite3_open_v2(path_.c_str(), &db_,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                           nullptr);
    if (code != SQLITE_OK) {
      problem = sqlite3_errmsg(db_);
    } else {
      sqlite3_busy_handler(db_, backoff, nullptr);
      // The first touch of the file: one that is not a database, or is damaged, fails here.
      step("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
      step("BEGIN IMMEDIATE;");
      step(kSchema);
      std::string version;
      if (code == SQLITE_OK) {
        Stmt v(db_, "SELECT value FROM meta WHERE key = 'schema_version'");
        if (v && sqlite3_step(v.s) == SQLITE_ROW) version = v.col_text(0);
      }
      if (code == SQLITE_OK && version.empty()) {
        Stmt ins(db_, "INSERT OR IGNORE INTO meta(key, value) VALUES('schema_version', ?1)");
        ins.text(1, std::to_string(kSchemaVersion));
        if (!ins || sqlite3_step(ins.s) != SQLITE_DONE)
          code = sqlite3_errcode(db_), problem = sqlite3_errmsg(db_);
        version = std::to_string(kSchemaVersion);
      }
      // The commit can fail on its own (a full disk: the schema is written here), which leaves
      // the database as empty as before: nothing could be stored in it.
      step("COMMIT;");
      if (sqlite3_get_autocommit(db_) == 0) (void)exec(db_, "ROLLBACK;");  // still open
      // Damage that opening does not touch is found by the statement that meets it (survive):
      // SQLite's quick_check here read the whole file at every open, 0.15 s for a 470 MB cache
      // at each process's first optimizer.
      if (code == SQLITE_OK && version != std::to_string(kSchemaVersion)) {
        problem = fmt::format("schema version {} (this optjit uses {})", version, kSchemaVersion);
        bad_file = true;
      }
      bad_file = bad_file || damaged(code);
    }
    if (problem.empty()) return Status::Ok();
    sqlite3_close(db_);
    db_ = nullptr;
    if (!bad_file) {
      // Another process holds the database: wait and try again; never treat it as damage.
      if (contended(code) && ++busy_rounds < 50) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20 * busy_rounds));
        continue;
      }
      return make_error("kernel cache {}: {}", path_, problem);
    }
    if (++attempt == 2) return make_error("kernel cache {}: {}", path_, problem);
    set_aside("unusable", problem);
  }
  return Status::Ok();
}

void KernelCache::set_aside(const char* was, const std::string& problem) {
  // A cache can always be rebuilt: keep the bad file for inspection and start afresh.
  std::string aside = fmt::format("{}.corrupt-{}-{}", path_, now(), ::getpid());
  std::error_code ec;
  fs::rename(path_, aside, ec);
  for (const char* ext : {"-wal", "-shm"}) fs::remove(path_ + ext, ec);
  warnings_.push_back(fmt::format("kernel cache {} was {} ({}); moved to {} and started a new one",
                                  path_, was, problem, aside));
}

bool KernelCache::survive(int code) {
  if (read_only_ || !damaged(code) || !db_) return false;
  const std::string problem = sqlite3_errmsg(db_);
  sqlite3_close_v2(db_);  // a statement still open (a caller's) closes it when finalized
  db_ = nullptr;
  set_aside("damaged", problem);
  if (Status s = open_user(); !s) {
    warnings_.push_back(s.error().message + "; running on without storing kernels");
    return false;
  }
  return true;
}

std::optional<KernelEntry> KernelCache::get_from(sqlite3* db, const KernelKey& key,
                                                 const std::string& layer) {
  Stmt q(db,
         "SELECT format, blob, checksum, resources, compile_seconds, created, last_used, "
         "fingerprint FROM kernels WHERE id = ?1");
  if (!q) return std::nullopt;
  q.text(1, key.id());
  if (int rc = sqlite3_step(q.s); rc != SQLITE_ROW) {
    if (db == db_) {
      q.finalize();  // before survive closes the database
      survive(rc);
    }
    return std::nullopt;
  }
  std::vector<uint8_t> blob = q.col_blob(1);
  std::string why;
  auto e = unwrap(blob, key.fingerprint);
  if (q.col_text(7) != key.fingerprint)
    why = "its row names another device";
  else if (!e)
    why = e.error().message;
  else if (checksum(blob.data(), blob.size()) != q.col_text(2))
    why = "the row's checksum does not match";
  if (!why.empty()) {
    ++session_.rejected;
    warnings_.push_back(fmt::format("kernel {} in {} was rejected ({}){}", key.id(), layer, why,
                                    layer == "user" ? " and removed" : ""));
    if (layer == "user") {
      Stmt del(db, "DELETE FROM kernels WHERE id = ?1");
      del.text(1, key.id());
      sqlite3_step(del.s);
    }
    return std::nullopt;
  }
  e->key = key;
  e->resources = q.col_text(3);
  e->compile_seconds = sqlite3_column_double(q.s, 4);
  e->created = sqlite3_column_int64(q.s, 5);
  e->last_used = sqlite3_column_int64(q.s, 6);
  e->layer = layer;
  return *e;
}

std::optional<KernelEntry> KernelCache::get(const KernelKey& key) {
  auto e = get_from(db_, key, "user");
  if (e && !read_only_) {
    Stmt touch(db_, "UPDATE kernels SET last_used = ?1 WHERE id = ?2");
    touch.integer(1, now());
    touch.text(2, key.id());
    const int rc = sqlite3_step(touch.s);
    touch.finalize();
    survive(rc);  // the kernel itself passed its checks
  }
  for (auto& [p, db] : shipped_) {
    if (e) break;
    e = get_from(db, key, p);
  }
  ++(e ? session_.hits : session_.misses);
  return e;
}

std::vector<std::string> KernelCache::shipped_paths() const {
  std::vector<std::string> out;
  for (const auto& [p, db] : shipped_) out.push_back(p);
  return out;
}

void KernelCache::warn(std::string line) {
  if (std::find(warnings_.begin(), warnings_.end(), line) == warnings_.end())
    warnings_.push_back(std::move(line));
}

Status KernelCache::write(const std::function<int(sqlite3*)>& run) {
  if (read_only_) return make_error("kernel cache {} is read-only", path_);
  for (int attempt = 0;; ++attempt) {
    const int rc = run(db_);  // its statement is finalized when it returns
    if (rc == SQLITE_DONE) return Status::Ok();
    std::string why = db_ ? sqlite3_errmsg(db_) : "no database";
    // A damaged file is moved aside and the statement run again in a new one, once.
    if (attempt == 0 && survive(rc)) continue;
    return make_error("kernel cache {}: {}", path_, why);
  }
}

Status KernelCache::put(const KernelEntry& entry) {
  const std::vector<uint8_t> blob = wrap(entry);
  return write([&](sqlite3* db) {
    Stmt ins(db,
             "INSERT OR IGNORE INTO kernels(id, fingerprint, program, variant, format, blob, "
             "checksum, resources, compile_seconds, created, last_used) "
             "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)");
    if (!ins) return sqlite3_errcode(db);
    ins.text(1, entry.key.id());
    ins.text(2, entry.key.fingerprint);
    ins.text(3, entry.key.program);
    ins.text(4, entry.key.variant);
    ins.text(5, entry.format);
    ins.blob(6, blob);
    ins.text(7, checksum(blob.data(), blob.size()));
    ins.text(8, entry.resources.empty() ? "{}" : entry.resources);
    ins.real(9, entry.compile_seconds);
    ins.integer(10, now());
    return sqlite3_step(ins.s);
  });
}

std::string KernelCache::explain_miss(const KernelKey& key) {
  Stmt q(db_, "SELECT fingerprint, program, variant FROM kernels");
  if (!q) return "the cache cannot be read";
  std::string best;
  int best_score = -1;
  while (sqlite3_step(q.s) == SQLITE_ROW) {
    std::string f = q.col_text(0), p = q.col_text(1), v = q.col_text(2);
    int score = (f == key.fingerprint) * 4 + (p == key.program) * 2 + (v == key.variant);
    if (score > best_score) {
      best_score = score;
      std::vector<std::string> diff;
      if (f != key.fingerprint)
        diff.push_back(fmt::format("device fingerprint ({} cached, {} here)", f, key.fingerprint));
      if (p != key.program)
        diff.push_back(fmt::format("program ({} cached, {} here)", p, key.program));
      if (v != key.variant)
        diff.push_back(fmt::format("variant ({} cached, {} here)", v, key.variant));
      best = diff.empty()
                 ? "an identical key exists"
                 : "nearest cached kernel differs in " + fmt::format("{}", fmt::join(diff, ", "));
    }
  }
  return best_score < 0 ? "the cache holds no kernels" : best;
}

std::vector<KernelEntry> KernelCache::list(bool with_payload) {
  std::vector<KernelEntry> out;
  auto read = [&](sqlite3* db, const std::string& layer) {
    Stmt q(db,
           "SELECT fingerprint, program, variant, format, length(blob), resources, "
           "compile_seconds, created, last_used, blob FROM kernels ORDER BY id");
    while (q && sqlite3_step(q.s) == SQLITE_ROW) {
      KernelEntry e;
      e.key = {q.col_text(0), q.col_text(1), q.col_text(2)};
      e.format = q.col_text(3);
      if (with_payload)
        e.payload = q.col_blob(9);
      else
        e.payload.resize(static_cast<size_t>(sqlite3_column_int64(q.s, 4)));
      e.resources = q.col_text(5);
      e.compile_seconds = sqlite3_column_double(q.s, 6);
      e.created = sqlite3_column_int64(q.s, 7);
      e.last_used = sqlite3_column_int64(q.s, 8);
      e.layer = layer;
      out.push_back(std::move(e));
    }
  };
  read(db_, "user");
  for (auto& [p, db] : shipped_) read(db, p);
  return out;
}

CacheStats KernelCache::stats() {
  CacheStats s = session_;
  Stmt q(db_, "SELECT count(*), coalesce(sum(length(blob)), 0) FROM kernels");
  if (q && sqlite3_step(q.s) == SQLITE_ROW) {
    s.kernels = sqlite3_column_int64(q.s, 0);
    s.bytes = sqlite3_column_int64(q.s, 1);
  }
  return s;
}

std::vector<std::string> KernelCache::verify() {
  std::vector<std::string> bad;
  std::vector<std::string> remove;
  {
    Stmt q(db_, "SELECT id, fingerprint, blob, checksum FROM kernels ORDER BY id");
    while (q && sqlite3_step(q.s) == SQLITE_ROW) {
      std::string id = q.col_text(0), fp = q.col_text(1);
      std::vector<uint8_t> blob = q.col_blob(2);
      auto e = unwrap(blob, fp);
      std::string why = !e ? e.error().message
                        : checksum(blob.data(), blob.size()) != q.col_text(3)
                            ? "row checksum mismatch"
                        : id.rfind(fp + "/", 0) != 0 ? "key names another device"
                                                     : "";
      if (!why.empty())
        bad.push_back(fmt::format("{}: {} ({})", id, why,
                                  read_only_ ? "not removed: the cache is read-only" : "removed")),
            remove.push_back(id);
    }
  }
  for (const auto& id : remove) {
    Stmt del(db_, "DELETE FROM kernels WHERE id = ?1");
    del.text(1, id);
    sqlite3_step(del.s);
  }
  Stmt ic(db_, "PRAGMA integrity_check");
  if (ic && sqlite3_step(ic.s) == SQLITE_ROW && ic.col_text(0) != "ok")
    bad.push_back("integrity_check: " + ic.col_text(0));
  return bad;
}

Expected<int64_t> KernelCache::prune(double max_age_days, int64_t max_bytes) {
  if (read_only_) return make_error("kernel cache {} is read-only: nothing can be pruned", path_);
  int64_t removed = 0;
  if (max_age_days >= 0) {
    Stmt del(db_, "DELETE FROM kernels WHERE last_used < ?1");
    del.integer(1, now() - static_cast<int64_t>(max_age_days * 86400));
    if (sqlite3_step(del.s) != SQLITE_DONE)
      return make_error("kernel cache: {}", sqlite3_errmsg(db_));
    removed += sqlite3_changes(db_);
  }
  if (max_bytes >= 0) {
    while (stats().bytes > max_bytes) {
      Stmt del(
          db_,
          "DELETE FROM kernels WHERE id = (SELECT id FROM kernels ORDER BY last_used, id LIMIT 1)");
      if (sqlite3_step(del.s) != SQLITE_DONE || sqlite3_changes(db_) == 0) break;
      ++removed;
    }
  }
  (void)exec(db_, "PRAGMA wal_checkpoint(TRUNCATE);");
  return removed;
}

namespace {
// The key and result both tuning tables start with (?1 to ?4).
void bind_tuning(Stmt& s, const std::string& program, int64_t bucket,
                 const std::string& performance, const std::string& config) {
  s.text(1, program);
  s.integer(2, bucket);
  s.text(3, performance);
  s.text(4, config);
}
}  // namespace

Status KernelCache::put_measurement(const std::string& program, int64_t bucket,
                                    const std::string& performance, const std::string& config,
                                    double seconds, int repetitions) {
  return write([&](sqlite3* db) {
    Stmt ins(db,
             "INSERT OR REPLACE INTO tuning_measurements(program, size_bucket, performance, "
             "config, seconds, repetitions, created) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    if (!ins) return sqlite3_errcode(db);
    bind_tuning(ins, program, bucket, performance, config);
    ins.real(5, seconds);
    ins.integer(6, repetitions);
    ins.integer(7, now());
    return sqlite3_step(ins.s);
  });
}

Status KernelCache::put_decision(const std::string& program, int64_t bucket,
                                 const std::string& performance, const std::string& config,
                                 bool replace) {
  return write([&](sqlite3* db) {
    Stmt ins(db, replace ? "INSERT OR REPLACE INTO tuning_decisions(program, size_bucket, "
                           "performance, config, created) VALUES(?1, ?2, ?3, ?4, ?5)"
                         : "INSERT OR IGNORE INTO tuning_decisions(program, size_bucket, "
                           "performance, config, created) VALUES(?1, ?2, ?3, ?4, ?5)");
    if (!ins) return sqlite3_errcode(db);
    bind_tuning(ins, program, bucket, performance, config);
    ins.integer(5, now());
    return sqlite3_step(ins.s);
  });
}

std::optional<std::string> KernelCache::get_decision(const std::string& program, int64_t bucket,
                                                     const std::string& performance, bool* exact) {
  std::optional<std::string> best;
  size_t best_prefix = 0;
  const std::string backend = performance.substr(0, performance.find('|') + 1);
  auto scan = [&](sqlite3* db) {
    Stmt q(db,
           "SELECT performance, config FROM tuning_decisions WHERE program = ?1 AND size_bucket = "
           "?2 ORDER BY performance");
    if (!q) return;
    q.text(1, program);
    q.integer(2, bucket);
    int rc;
    while ((rc = sqlite3_step(q.s)) == SQLITE_ROW) {
      std::string perf = q.col_text(0);
      if (perf == performance) {
        if (!best || best_prefix != SIZE_MAX) best = q.col_text(1), best_prefix = SIZE_MAX;
        continue;
      }
      if (perf.rfind(backend, 0) != 0 || best_prefix == SIZE_MAX)
        continue;  // a binary never, tuning only on the same backend
      size_t common = 0;
      while (common < perf.size() && common < performance.size() &&
             perf[common] == performance[common])
        ++common;
      if (!best || common > best_prefix) best = q.col_text(1), best_prefix = common;
    }
    if (db == db_) {
      q.finalize();  // before survive closes the database
      survive(rc);
    }
  };
  scan(db_);
  for (auto& [p, db] : shipped_)
    if (best_prefix != SIZE_MAX) scan(db);
  if (exact) *exact = best_prefix == SIZE_MAX;
  return best;
}

std::vector<TuningDecision> KernelCache::decisions() {
  std::vector<TuningDecision> out;
  Stmt q(db_,
         "SELECT program, size_bucket, performance, config FROM tuning_decisions ORDER BY program, "
         "size_bucket, performance");
  if (!q) return out;
  while (sqlite3_step(q.s) == SQLITE_ROW)
    out.push_back({q.col_text(0), sqlite3_column_int64(q.s, 1), q.col_text(2), q.col_text(3)});
  return out;
}

int64_t KernelCache::measurement_count() {
  Stmt q(db_, "SELECT count(*) FROM tuning_measurements");
  return q && sqlite3_step(q.s) == SQLITE_ROW ? sqlite3_column_int64(q.s, 0) : 0;
}

Expected<std::unique_ptr<KernelCache>> open_for_run(const CacheOptions& options,
                                                    std::vector<std::string>& warnings) {
  auto c = KernelCache::open(options);
  if (!c) {
    if (options.strict) return c.error();
    warnings.push_back(c.error().message + "; running without the kernel cache");
    return std::unique_ptr<KernelCache>();
  }
  warnings.insert(warnings.end(), (*c)->warnings().begin(), (*c)->warnings().end());
  return std::move(*c);
}

Expected<CachedCompile> cached_compile(KernelCache* cache, const KernelKey& key,
                                       const std::string& format, const std::string& what,
                                       const std::function<Expected<Compiled>()>& compile,
                                       const std::function<bool(const KernelEntry&)>& accept) {
  bool refused = false;
  if (cache) {
    if (auto hit = cache->get(key)) {
      if (!accept || accept(*hit))
        return CachedCompile{std::move(hit->payload), std::move(hit->resources), 0, true};
      refused = true;  // compile below; the stored bytes are not re-read
    } else if (cache->strict()) {
      return make_error("kernel cache miss in strict mode for {} of this pipeline: {}", what,
                        cache->explain_miss(key));
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto built = compile();
  if (!built) return built.error();
  CachedCompile out{std::move(built->payload), std::move(built->resources),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                    false};
  if (cache && !refused) {
    // A cache that cannot be written is not an error: the kernels are here. But it is said
    // (once per cache), or a cache meant to be shipped warm would ship cold without a word.
    if (Status s = cache->put({key, format, out.payload, out.resources, out.seconds, 0, 0, ""});
        !s) {
      out.not_stored = s.error().message;
      cache->warn(s.error().message +
                  "; kernels compiled now are not stored and will be compiled again");
    }
    // Another process may have stored this key first: use its bytes, as every process will.
    if (auto winner = cache->get(key)) {
      out.payload = std::move(winner->payload);
      out.resources = std::move(winner->resources);
    }
  }
  return out;
}

std::string source_variant(const std::string& options, const std::string& source) {
  return fmt::format("{}-src={:016x}", options, XXH3_64bits(source.data(), source.size()));
}

}  // namespace optjit::cache
