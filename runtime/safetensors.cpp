#include "runtime/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

namespace optjit::runtime {

namespace {

struct DTypeName {
  DType t;
  const char* name;
};
constexpr DTypeName kNames[] = {{DType::f64, "F64"},   {DType::f32, "F32"}, {DType::f16, "F16"},
                                {DType::bf16, "BF16"}, {DType::i64, "I64"}, {DType::b1, "BOOL"}};

const char* st_name(DType t) {
  for (auto n : kNames)
    if (n.t == t) return n.name;
  return "?";
}

}  // namespace

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

double load_element(const uint8_t* base, DType t, int64_t i) {
  switch (t) {
    case DType::f64: {
      double v;
      std::memcpy(&v, base + 8 * i, 8);
      return v;
    }
    case DType::f32: {
      float v;
      std::memcpy(&v, base + 4 * i, 4);
      return v;
    }
    case DType::f16: {
      uint16_t b;
      std::memcpy(&b, base + 2 * i, 2);
      return f16_value(b);
    }
    case DType::bf16: {
      uint16_t b;
      std::memcpy(&b, base + 2 * i, 2);
      return bf16_value(b);
    }
    case DType::i64: {
      int64_t v;
      std::memcpy(&v, base + 8 * i, 8);
      return static_cast<double>(v);
    }
    case DType::b1:
      return base[i] != 0;
  }
  return 0;
}

void store_element(uint8_t* base, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f64:
      std::memcpy(base + 8 * i, &v, 8);
      break;
    case DType::f32: {
      float f = static_cast<float>(v);
      std::memcpy(base + 4 * i, &f, 4);
      break;
    }
    case DType::f16: {
      uint16_t b = f16_bits(v);
      std::memcpy(base + 2 * i, &b, 2);
      break;
    }
    case DType::bf16: {
      uint16_t b = bf16_bits(v);
      std::memcpy(base + 2 * i, &b, 2);
      break;
    }
    case DType::i64: {
      auto x = static_cast<int64_t>(round_to(DType::i64, v));
      std::memcpy(base + 8 * i, &x, 8);
      break;
    }
    case DType::b1:
      base[i] = v != 0;
      break;
  }
}

double HostTensor::get(int64_t i) const { return load_element(data.data(), dtype, i); }
void HostTensor::set(int64_t i, double v) { store_element(data.data(), dtype, i, v); }

HostTensor HostTensor::zeros(std::string name, DType dtype, std::vector<int64_t> shape) {
  HostTensor t{std::move(name), dtype, std::move(shape), {}};
  t.data.assign(static_cast<size_t>(t.numel()) * size_bytes(dtype), 0);
  return t;
}

const HostTensor* TensorFile::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

Expected<TensorFile> read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return make_error("{}: cannot open ({})", path, std::strerror(errno));
  auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  auto bad = [&](std::string why) {
    return make_error("{}: not a valid safetensors file: {}", path, why);
  };
  if (file_size < 8) return bad("shorter than its 8-byte header length");
  uint8_t len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > file_size - 8 || header_len > (100u << 20))
    return bad(
        fmt::format("header length {} does not fit in a file of {} bytes", header_len, file_size));
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("the header is not a JSON object");
  const uint64_t data_size = file_size - 8 - header_len;
  std::vector<uint8_t> data(data_size);
  in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data_size));
  if (!in) return bad("could not read the data section");

  TensorFile out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) return bad("__metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m)
        if (m.value().is_string()) out.metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets"))
      return bad(fmt::format("tensor '{}' lacks dtype, shape or data_offsets", name));
    if (!e["dtype"].is_string())
      return bad(fmt::format("tensor '{}': dtype is not a string", name));
    std::string dt = e["dtype"].get<std::string>();
    HostTensor t;
    t.name = name;
    bool known = false;
    for (auto n : kNames)
      if (dt == n.name) t.dtype = n.t, known = true;
    if (!known)
      return make_error(
          "{}: tensor '{}' has dtype {}, which optjit does not support (F64, F32, F16, BF16, I64, "
          "BOOL)",
          path, name, dt);
    if (!e["shape"].is_array()) return bad(fmt::format("tensor '{}': shape is not a list", name));
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return bad(fmt::format("tensor '{}': shape has a non-integer or negative size", name));
      auto dim = d.get<uint64_t>();
      if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / dim)
        return bad(fmt::format("tensor '{}': shape is too large", name));
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      return bad(fmt::format("tensor '{}': data_offsets is not two offsets", name));
    uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    if (b > en || en > data_size)
      return bad(fmt::format("tensor '{}': data_offsets [{}, {}] fall outside the {} data bytes",
                             name, b, en, data_size));
    if (en - b != numel * size_bytes(t.dtype))
      return bad(fmt::format("tensor '{}': {} bytes of data for {} elements of {}", name, en - b,
                             numel, dt));
    ranges.emplace_back(b, en);
    t.data.assign(data.begin() + static_cast<std::ptrdiff_t>(b),
                  data.begin() + static_cast<std::ptrdiff_t>(en));
    out.tensors.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) return bad("two tensors' data overlap");
  return out;
}

Status write_safetensors(const std::string& path, const TensorFile& file) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& t : file.tensors) {
    if (t.data.size() != static_cast<size_t>(t.numel()) * size_bytes(t.dtype))
      return make_error("tensor '{}' has {} bytes for shape of {} elements", t.name, t.data.size(),
                        t.numel());
    h[t.name] = {{"dtype", st_name(t.dtype)},
                 {"shape", t.shape},
                 {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  if (!file.metadata.empty()) h["__metadata__"] = file.metadata;
  std::string header = h.dump();
  while ((8 + header.size()) % 8 != 0)
    header.push_back(' ');  // align the data, as the reference writer does
  std::string tmp = path + ".tmp-optjit-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return make_error("{}: cannot create ({})", tmp, std::strerror(errno));
  auto write_all = [&](const void* p, size_t n) {
    auto* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd, c, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  };
  uint8_t len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  bool ok = write_all(len, 8) && write_all(header.data(), header.size());
  for (const auto& t : file.tensors) ok = ok && write_all(t.data.data(), t.data.size());
  int err = errno;
  ok = ok && ::fsync(fd) == 0;
  if (!ok) err = errno;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) err = errno;
    ::unlink(tmp.c_str());
    return make_error("{}: cannot write ({})", path, std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace optjit::runtime
