// The kernel cache: compiled kernels in SQLite, keyed by the exact device fingerprint, so a
// second process (or a product shipping a warm database) compiles nothing.
//
// Layers: the user's read-write database (OPTJIT_CACHE_DIR, else $XDG_CACHE_HOME/optjit, else
// ~/.cache/optjit) over any number of read-only shipped databases; user rows win.
// Every blob is wrapped in an envelope that names its fingerprint and carries a checksum; both
// are checked on every load, so a damaged or foreign blob is never loaded. A database that is
// not one, is damaged, or has another schema version is moved aside with a warning and a new
// one is created: it is a cache. Concurrent writers converge: the first insert of a key wins.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/error.h"

struct sqlite3;

namespace optjit::cache {

inline constexpr int kSchemaVersion = 1;

/// What a kernel is for: the device's exact fingerprint, the program's structural hash and
/// the launch variant (backend options that change the code, and for CUDA and OpenCL a hash of
/// the emitted source: "cuda-block=256,items=1,vec=1-src=<16 hex digits>").
struct KernelKey {
  std::string fingerprint;  // runtime::DeviceRecord::exact_id()
  std::string program;      // 16 hex digits of ir::structural_hash
  std::string variant;
  std::string id() const;  // what the database is keyed by
};

struct KernelEntry {
  KernelKey key;
  std::string format;  // "elf-object", "cubin", "opencl-binary"
  std::vector<uint8_t> payload;
  std::string resources;  // JSON: registers, spills, ...
  double compile_seconds = 0;
  int64_t created = 0, last_used = 0;  // unix seconds
  std::string layer;                   // where it was found: "user" or a shipped file
};

struct CacheOptions {
  std::string dir;   // empty: from the environment (see above)
  std::string file;  // a database file to use instead of <dir>/kernels.sqlite
  // Read-only layers; empty: OPTJIT_CACHE_SHIPPED (paths separated by ':').
  std::vector<std::string> shipped;  // read-only databases under the user's
  bool strict = false;               // a miss is an error instead of a compile
};

/// Where the user's database lives, from the options and the environment.
std::string default_cache_dir();

struct CacheStats {
  int64_t kernels = 0, bytes = 0;
  int64_t hits = 0, misses = 0, rejected = 0;  // this process
};

class KernelCache;

/// What a compiler produced: the bytes and what it reported (JSON: registers, spills, ...).
struct Compiled {
  std::vector<uint8_t> payload;
  std::string resources = "{}";
};

struct CachedCompile {
  std::vector<uint8_t> payload;
  std::string resources;
  double seconds = 0;  // compiling, or 0 for a hit
  bool from_cache = false;
  std::string not_stored;  // compiled but not stored: why (a full disk, a read-only cache)
};

/// The one protocol every compiler goes through (CPU object code, cubins, OpenCL binaries):
/// the stored kernel for `key` if there is one (and `accept`, when given, takes it: a driver
/// may refuse a binary); else, with a strict cache, an error naming the nearest stored key;
/// else compile, store, and re-read the key, so that when another process stored it first
/// every process uses the same bytes. `what` names the kernels in the strict error ("the
/// cuda kernels"); `format` is stored with them ("cubin"). Without a cache it just compiles.
Expected<CachedCompile> cached_compile(KernelCache* cache, const KernelKey& key,
                                       const std::string& format, const std::string& what,
                                       const std::function<Expected<Compiled>()>& compile,
                                       const std::function<bool(const KernelEntry&)>& accept = {});

/// The kernel-cache variant for emitted source: the options that change the code plus a hash of
/// the source itself, so a change to an emitter can never load a stale binary, whether or not
/// its version was bumped ("cuda-block=256,items=1,vec=1-src=<16 hex digits>").
std::string source_variant(const std::string& options, const std::string& source);

/// A tuning decision as stored: the chosen configuration for a program at a size on a device.
struct TuningDecision {
  std::string program;
  int64_t size_bucket = 0;
  std::string performance, config;
};

class KernelCache {
 public:
  static Expected<std::unique_ptr<KernelCache>> open(CacheOptions options = {});
  ~KernelCache();

  /// The kernel for `key`, from the user layer then the shipped ones, checked (envelope,
  /// fingerprint, checksum). A bad row is reported in warnings() and removed from the user layer.
  std::optional<KernelEntry> get(const KernelKey& key);
  /// Stores a kernel; if another process stored the key first, theirs stays (and is returned
  /// by the next get), so every process ends up using the same bytes.
  Status put(const KernelEntry& entry);
  /// Why a lookup missed: the nearest stored key and which part of it differs.
  std::string explain_miss(const KernelKey& key);

  std::vector<KernelEntry> list(bool with_payload = false);
  CacheStats stats();
  /// Checks every row; returns one line per bad row (empty: all good) and removes them.
  std::vector<std::string> verify();
  /// Removes kernels not used for `max_age_days`, then the least recently used until the user
  /// database holds at most `max_bytes` of payload. Returns how many were removed.
  Expected<int64_t> prune(double max_age_days, int64_t max_bytes);

  /// Tuning: one measurement per candidate configuration, and the chosen configuration per
  /// (program, size bucket, device performance fingerprint). The first decision stored wins.
  Status put_measurement(const std::string& program, int64_t bucket, const std::string& performance,
                         const std::string& config, double seconds, int repetitions);
  /// `replace`: overwrite a stored decision (one this version could not read) instead.
  Status put_decision(const std::string& program, int64_t bucket, const std::string& performance,
                      const std::string& config, bool replace = false);
  /// The decision for exactly this device, else for the nearest one of the same backend
  /// (longest common prefix of the performance fingerprint); `exact` says which it was.
  std::optional<std::string> get_decision(const std::string& program, int64_t bucket,
                                          const std::string& performance, bool* exact = nullptr);
  int64_t measurement_count();
  /// The user layer's tuning decisions, ordered by program, size and device.
  std::vector<TuningDecision> decisions();

  bool strict() const { return options_.strict; }
  /// The user database exists but this process may not write it (a read-only file system, a
  /// cache of another user's): its kernels and decisions are used, nothing new is stored.
  bool read_only() const { return read_only_; }
  const std::string& path() const { return path_; }
  /// The shipped databases it reads.
  std::vector<std::string> shipped_paths() const;
  /// What went wrong with the cache, from opening it on (a rejected kernel, a kernel that
  /// could not be stored): one line each.
  const std::vector<std::string>& warnings() const { return warnings_; }
  /// Adds a warning, unless this exact one was given already.
  void warn(std::string line);

 private:
  KernelCache() = default;
  Status open_user();
  Status open_user_read_only();
  /// A statement on the user database failed with `code`: where that says the file is damaged,
  /// it is moved aside and a new database opened (true: try again there).
  bool survive(int code);
  /// Runs a statement that writes the user database (`run` prepares, binds and steps it, and
  /// returns the step's code), surviving a damaged file: moved aside, the statement run again.
  Status write(const std::function<int(sqlite3*)>& run);
  /// Moves the user database (and its log and index) aside, saying it `was` so and why.
  void set_aside(const char* was, const std::string& problem);
  std::optional<KernelEntry> get_from(sqlite3* db, const KernelKey& key, const std::string& layer);
  CacheOptions options_;
  std::string path_;
  sqlite3* db_ = nullptr;
  bool read_only_ = false;  // the user database could only be opened for reading
  std::vector<std::pair<std::string, sqlite3*>> shipped_;
  std::vector<std::string> warnings_;
  CacheStats session_;
};

/// Envelope format, shared with export/import: "OPTJITK1" | fingerprint | format | xxh3 | payload.
std::vector<uint8_t> wrap(const KernelEntry& e);
Expected<KernelEntry> unwrap(const std::vector<uint8_t>& blob, const std::string& want_fingerprint);

/// Opens the cache for a run: a cache that cannot be opened is an error only when strict;
/// otherwise it is a warning and the result is null (run without a cache). The warnings (that
/// one, or the cache's own about rows it moved aside) are appended to `warnings`.
Expected<std::unique_ptr<KernelCache>> open_for_run(const CacheOptions& options,
                                                    std::vector<std::string>& warnings);

}  // namespace optjit::cache
