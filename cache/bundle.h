// Shipping a warm cache: bundles are kernel databases with chosen rows, optionally signed.
#pragma once

#include <string>
#include <vector>

#include "cache/kernel_cache.h"

namespace optjit::cache {

/// Writes the user layer's kernels whose fingerprint id is in `fingerprints` (all, if empty)
/// to a new database at `path` (replaced atomically). Returns how many were written.
Expected<int64_t> export_bundle(KernelCache& cache, const std::string& path,
                                const std::vector<std::string>& fingerprints);

/// Copies a bundle's kernels into the user layer, checking every envelope; kernels already in
/// the user layer stay. Returns how many were added.
Expected<int64_t> import_bundle(KernelCache& cache, const std::string& path);

/// Ed25519 (libsodium): a key pair in `<prefix>.key` (secret) and `<prefix>.pub`, a detached
/// signature of a file in `<file>.sig`, and its check.
Status make_signing_key(const std::string& prefix);
Status sign_file(const std::string& file, const std::string& secret_key);
Status verify_file(const std::string& file, const std::string& public_key);

}  // namespace optjit::cache
