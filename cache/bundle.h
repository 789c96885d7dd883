// Shipping a warm cache: bundles are kernel databases with chosen rows, optionally signed.
#pragma once

#include <string>
#include <vector>

#include "cache/kernel_cache.h"

namespace optjit::cache {

struct BundleCounts {
  int64_t kernels = 0, decisions = 0;
};

/// Writes the user layer's kernels whose fingerprint id is in `fingerprints` (all, if empty)
/// to a new database at `path`, with the tuning decisions for the programs of those kernels
/// (all, if empty), so users neither compile nor tune. With a `secret_key`, also its
/// signature at `<path>.sig`. The key is checked first, and `path` (and the signature) are
/// replaced together and only once everything is written: a failure changes nothing.
Expected<BundleCounts> export_bundle(KernelCache& cache, const std::string& path,
                                     const std::vector<std::string>& fingerprints,
                                     const std::string& secret_key = "");

/// Copies a bundle's kernels and tuning decisions into the user layer, checking every
/// envelope; what the user layer already has stays. Returns how many of each were added.
Expected<BundleCounts> import_bundle(KernelCache& cache, const std::string& path);

/// Ed25519 (libsodium): a key pair in `<prefix>.key` (secret) and `<prefix>.pub`, a detached
/// signature of a file in `<file>.sig`, and its check.
Status make_signing_key(const std::string& prefix);
Status sign_file(const std::string& file, const std::string& secret_key);
Status verify_file(const std::string& file, const std::string& public_key);

}  // namespace optjit::cache
