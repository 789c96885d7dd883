// Reading and writing .safetensors files (the format of Hugging Face's safetensors).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ir/error.h"
#include "ir/types.h"

namespace optjit::runtime {

/// A dense, row-major tensor in host memory.
struct HostTensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  int64_t numel() const;
  double get(int64_t i) const;    // element i as a double
  void set(int64_t i, double v);  // rounds to dtype (nearest, ties to even)
  static HostTensor zeros(std::string name, DType dtype, std::vector<int64_t> shape);
};

double load_element(const uint8_t* base, DType t, int64_t i);
void store_element(uint8_t* base, DType t, int64_t i, double v);

struct TensorFile {
  std::vector<HostTensor> tensors;
  std::map<std::string, std::string> metadata;
  const HostTensor* find(std::string_view name) const;
};

/// Reads and validates a file: header size, JSON, dtypes, shapes, offsets within the data.
Expected<TensorFile> read_safetensors(const std::string& path);
/// Writes atomically (a temporary file, fsync, rename), so an existing file is never left
/// half-written and nothing is created on failure.
Status write_safetensors(const std::string& path, const TensorFile& file);
/// Several files that appear together: none is replaced unless all were written.
Status write_safetensors(const std::vector<std::pair<std::string, const TensorFile*>>& files);

}  // namespace optjit::runtime
