#include "cache/bundle.h"

#include <sodium.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "support/input_file.h"
#include "support/output_file.h"

namespace optjit::cache {

namespace fs = std::filesystem;

namespace {

// Keys and signatures are a few dozen bytes: a file far larger is none.
constexpr uintmax_t kMaxKeyBytes = 1 << 16;

Status sodium() {
  if (sodium_init() < 0) return make_error("libsodium failed to start");
  return Status::Ok();
}

Expected<std::string> read_secret_key(const std::string& path) {
  auto sk = support::read_file(path, kMaxKeyBytes);
  if (!sk) return sk.error();
  if (sk->size() != crypto_sign_SECRETKEYBYTES)
    return make_error("{}: not an optjit signing key", path);
  return sk;
}

std::string signature(const std::string& data, const std::string& secret_key) {
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, reinterpret_cast<const unsigned char*>(data.data()),
                       data.size(), reinterpret_cast<const unsigned char*>(secret_key.data()));
  return std::string(reinterpret_cast<char*>(sig), sizeof(sig));
}

}  // namespace

Expected<BundleCounts> export_bundle(KernelCache& cache, const std::string& path,
                                     const std::vector<std::string>& fps,
                                     const std::string& secret_key) {
  std::string key;
  if (!secret_key.empty()) {
    OPTJIT_TRY(sodium());
    auto k = read_secret_key(secret_key);
    if (!k) return k.error();
    key = std::move(*k);
  }
  // The bundle replaces `path`: never a database the cache reads (the bundle would replace
  // the cache, keeping only what the bundle took of it).
  if (support::same_file(path, cache.path()))
    return make_error(
        "{} is the kernel cache's own database (optjit cache path): a bundle written there "
        "would replace the cache; give another file",
        path);
  for (const std::string& shipped : cache.shipped_paths())
    if (support::same_file(path, shipped))
      return make_error("{} is a shipped kernel database the cache reads; give another file", path);
  auto file = support::OutputFile::create(path);
  if (!file) return file.error();
  std::optional<support::OutputFile> sig;
  if (!key.empty()) {
    auto s = support::OutputFile::create(path + ".sig");
    if (!s) return s.error();
    sig = std::move(*s);
  }
  const std::string tmp = file->temp_path();
  BundleCounts n;
  std::set<std::string> programs;
  {
    auto out = KernelCache::open({.file = tmp});
    if (!out) return out.error();
    for (const auto& e : cache.list(true)) {
      if (e.layer != "user") continue;
      if (!fps.empty() && std::find(fps.begin(), fps.end(), e.key.fingerprint) == fps.end())
        continue;
      auto inner = unwrap(e.payload, e.key.fingerprint);  // list() gives the stored envelope
      if (!inner) continue;
      inner->key = e.key;
      inner->resources = e.resources;
      inner->compile_seconds = e.compile_seconds;
      OPTJIT_TRY((*out)->put(*inner));
      programs.insert(e.key.program);
      ++n.kernels;
    }
    for (const auto& d : cache.decisions()) {
      if (!fps.empty() && !programs.count(d.program)) continue;
      OPTJIT_TRY((*out)->put_decision(d.program, d.size_bucket, d.performance, d.config));
      ++n.decisions;
    }
    auto done = (*out)->prune(-1, -1);  // checkpoint: one self-contained file
    if (!done) return done.error();
  }
  std::error_code ec;
  for (const char* ext : {"-wal", "-shm"}) fs::remove(tmp + ext, ec);
  if (sig) {
    auto data = support::read_file(tmp);
    if (!data) return data.error();
    OPTJIT_TRY(sig->write(signature(*data, key)));
    OPTJIT_TRY(support::commit_all({&*file, &*sig}));
  } else {
    OPTJIT_TRY(file->commit());
  }
  return n;
}

Expected<BundleCounts> import_bundle(KernelCache& cache, const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // (not the throwing overload: EACCES)
  if (ec && ec != std::errc::no_such_file_or_directory)
    return make_error("{}: cannot be examined ({})", path, ec.message());
  if (!fs::exists(st)) return make_error("{}: no such bundle", path);
  OPTJIT_TRY(support::check_input_file(path));
  {
    // SQLite opens an empty file, or any file with the magic, as an empty database: a
    // truncated download would import nothing and say nothing.
    std::ifstream in(path, std::ios::binary);
    char magic[16] = {};
    in.read(magic, sizeof(magic));
    if (in.gcount() == 0) return make_error("{}: not a kernel bundle (the file is empty)", path);
    if (in.gcount() < 16 ||
        std::string_view(magic, 16) != std::string_view("SQLite format 3\0", 16))
      return make_error("{}: not a kernel bundle (not an SQLite database)", path);
  }
  // Read the bundle through a private copy, so a bundle on read-only media works and is never
  // changed.
  const fs::path tmp = fs::temp_directory_path(ec);  // (it throws where TMPDIR is no directory)
  if (ec)
    return make_error("{}: no temporary directory to read it through ({})", path, ec.message());
  std::string copy = (tmp / ("optjit-import-" + std::to_string(::getpid()) + ".sqlite")).string();
  fs::copy_file(path, copy, fs::copy_options::overwrite_existing, ec);
  if (ec)  // (a full disk where the copy goes, as often as an unreadable bundle)
    return make_error("{}: cannot copy it to {} to read it ({})", path, copy, ec.message());
  BundleCounts added;
  std::string problem;
  {
    // An SQLite database, but is it a bundle? (Opening it as a cache would create the tables.)
    sqlite3* db = nullptr;
    int tables = 0;
    if (sqlite3_open_v2(copy.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
      sqlite3_exec(
          db,
          "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN ('meta','kernels')",
          [](void* n, int, char** v, char**) {
            *static_cast<int*>(n) = v[0] ? std::atoi(v[0]) : 0;
            return 0;
          },
          &tables, nullptr);
    }
    sqlite3_close(db);
    if (tables != 2) problem = "not a kernel bundle (an SQLite database without optjit's tables)";
  }
  if (problem.empty()) {
    auto in = KernelCache::open({.file = copy});
    if (!in)
      problem = in.error().message;
    else if (!(*in)->warnings().empty())
      problem = fmt::format("not a valid kernel bundle: {}", (*in)->warnings()[0]);
    else {
      const int64_t before = cache.stats().kernels;
      const auto entries = (*in)->list(true);
      size_t done = 0;
      for (const auto& e : entries) {
        auto inner = unwrap(e.payload, e.key.fingerprint);
        if (!inner) {
          problem = fmt::format("kernel {} is damaged ({})", e.key.id(), inner.error().message);
          break;
        }
        inner->key = e.key;
        inner->resources = e.resources;
        inner->compile_seconds = e.compile_seconds;
        if (Status s = cache.put(*inner); !s) {
          // (Each kernel is its own transaction: the ones before it stay, whole.)
          problem = fmt::format("{} ({} of its {} kernels were imported before)", s.error().message,
                                done, entries.size());
          break;
        }
        ++done;
      }
      added.kernels = cache.stats().kernels - before;
      const size_t decisions_before = cache.decisions().size();
      for (const auto& d : (*in)->decisions())
        if (problem.empty())
          if (Status s = cache.put_decision(d.program, d.size_bucket, d.performance, d.config); !s)
            problem = s.error().message;
      added.decisions = static_cast<int64_t>(cache.decisions().size() - decisions_before);
    }
  }
  for (const char* ext : {"", "-wal", "-shm"}) fs::remove(copy + ext, ec);
  for (auto& f : fs::directory_iterator(fs::path(copy).parent_path(), ec))
    if (f.path().filename().string().rfind(fs::path(copy).filename().string() + ".corrupt-", 0) ==
        0)
      fs::remove(f.path(), ec);
  if (!problem.empty()) return make_error("{}: {}", path, problem);
  return added;
}

Status make_signing_key(const std::string& prefix) {
  OPTJIT_TRY(sodium());
  // A signing key is not replaced: bundles signed with it, and the public key users were given,
  // would be orphaned (a second keygen with the same prefix did that silently).
  for (const char* ext : {".key", ".pub"}) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(prefix + ext, ec)))
      return make_error(
          "{}{} exists: keygen does not replace a signing key (move it away first, or give "
          "another prefix)",
          prefix, ext);
  }
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_keypair(pk, sk);
  auto secret = support::OutputFile::create(prefix + ".key", 0600);
  if (!secret) return secret.error();
  auto pub = support::OutputFile::create(prefix + ".pub");
  if (!pub) return pub.error();
  OPTJIT_TRY(secret->write(std::string(reinterpret_cast<char*>(sk), sizeof(sk))));
  OPTJIT_TRY(pub->write(std::string(reinterpret_cast<char*>(pk), sizeof(pk))));
  return support::commit_all({&*secret, &*pub});
}

Status sign_file(const std::string& file, const std::string& secret_key) {
  OPTJIT_TRY(sodium());
  auto sk = read_secret_key(secret_key);
  if (!sk) return sk.error();
  auto data = support::read_file(file);
  if (!data) return data.error();
  return support::write_file(file + ".sig", signature(*data, *sk));
}

Status verify_file(const std::string& file, const std::string& public_key) {
  OPTJIT_TRY(sodium());
  auto data = support::read_file(file);
  if (!data) return data.error();
  auto pk = support::read_file(public_key, kMaxKeyBytes);
  if (!pk) return pk.error();
  if (pk->size() != crypto_sign_PUBLICKEYBYTES)
    return make_error("{}: not an optjit public key", public_key);
  auto sig = support::read_file(file + ".sig", kMaxKeyBytes);
  if (!sig) {
    std::error_code ec;
    if (!fs::exists(file + ".sig", ec)) return make_error("{}: no signature ({}.sig)", file, file);
    return sig.error();
  }
  if (sig->size() != crypto_sign_BYTES ||
      crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(sig->data()),
                                  reinterpret_cast<const unsigned char*>(data->data()),
                                  data->size(),
                                  reinterpret_cast<const unsigned char*>(pk->data())) != 0)
    return make_error(
        "{}: the signature does not match (the bundle was changed, or signed with another key)",
        file);
  return Status::Ok();
}

}  // namespace optjit::cache
