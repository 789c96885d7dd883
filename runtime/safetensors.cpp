#include "runtime/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "support/input_file.h"
#include "support/output_file.h"

namespace optjit::runtime {

namespace {

struct DTypeName {
  DType t;
  const char* name;
};
constexpr DTypeName kNames[] = {{DType::f64, "F64"},   {DType::f32, "F32"}, {DType::f16, "F16"},
                                {DType::bf16, "BF16"}, {DType::i64, "I64"}, {DType::b1, "BOOL"},
                                {DType::u8, "U8"},     {DType::u16, "U16"}};

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
    case DType::u8:
      return base[i];
    case DType::u16: {
      uint16_t v;
      std::memcpy(&v, base + 2 * i, 2);
      return v;
    }
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
      // A file's integers: truncated, saturated at INT64_MIN and INT64_MAX, Inf and NaN 0
      // (the IR's i64 values, round_to's, stop at 2^53; a file's need not).
      const double r = std::isfinite(v) ? std::trunc(v) : 0.0;
      const int64_t x = r >= 0x1p63 ? INT64_MAX : r < -0x1p63 ? INT64_MIN : static_cast<int64_t>(r);
      std::memcpy(base + 8 * i, &x, 8);
      break;
    }
    case DType::b1:
      base[i] = v != 0;
      break;
    case DType::u8:
      base[i] = static_cast<uint8_t>(round_to(DType::u8, v));
      break;
    case DType::u16: {
      const auto x = static_cast<uint16_t>(round_to(DType::u16, v));
      std::memcpy(base + 2 * i, &x, 2);
      break;
    }
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

namespace {

// The format's own limit on the header (the reference library's MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// The header parsed as JSON, with what nlohmann::json would let pass silently found: a key
// that appears twice in one object (the last would win), and nesting deeper than the format's
// (a tensor's entry holds lists of numbers; nothing deeper is ever needed).
struct Header {
  nlohmann::json json;
  std::string problem;
};

Header parse_header(const std::string& text) {
  Header h;
  std::vector<std::set<std::string>> keys;  // one per open object or array
  std::vector<std::string> where;           // the key that opened each level
  std::string last_key;
  using E = nlohmann::json::parse_event_t;
  auto cb = [&](int depth, E event, nlohmann::json& parsed) -> bool {
    switch (event) {
      case E::object_start:
      case E::array_start:
        keys.emplace_back();
        where.push_back(last_key);
        if (depth > 3 && h.problem.empty())
          h.problem = fmt::format("the header nests deeper than the format does (under '{}')",
                                  where.size() > 1 ? where[1] : last_key);
        break;
      case E::object_end:
      case E::array_end:
        if (!keys.empty()) keys.pop_back(), where.pop_back();
        break;
      case E::key: {
        last_key = parsed.get<std::string>();
        if (!keys.empty() && !keys.back().insert(last_key).second && h.problem.empty())
          h.problem = keys.size() == 1
                          ? fmt::format("'{}' appears twice", last_key)
                          : fmt::format("'{}' appears twice in the entry of '{}'", last_key,
                                        where.size() > 1 ? where[1] : where.back());
        break;
      }
      case E::value:
        break;
    }
    return depth <= 3;  // deeper values are not kept (and are an error above)
  };
  h.json = nlohmann::json::parse(text, cb, /*allow_exceptions=*/false);
  return h;
}

std::string json_type(const nlohmann::json& j) {
  return j.is_null() ? "null" : std::string(j.type_name());
}

}  // namespace

Expected<TensorFile> read_safetensors(const std::string& path) {
  // Opening a FIFO waits for a writer (forever), and a device has no size to check against.
  OPTJIT_TRY(support::check_input_file(path));
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
  if (header_len > file_size - 8)
    return bad(
        fmt::format("header length {} does not fit in a file of {} bytes", header_len, file_size));
  if (header_len > kMaxHeaderBytes)
    return bad(fmt::format("its header length {} is over the format's limit of {} bytes",
                           header_len, kMaxHeaderBytes));
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  if (!in) return bad("could not read the header");
  // JSON has no raw NUL (a string escapes it), and nlohmann::json would stop reading there.
  if (size_t nul = header.find('\0'); nul != std::string::npos)
    return bad(fmt::format("the header is not JSON (a NUL byte at {})", nul));
  Header parsed = parse_header(header);
  const nlohmann::json& j = parsed.json;
  if (j.is_discarded() && parsed.problem.empty())
    return bad(header_len == 0 ? "the header is empty" : "the header is not JSON");
  if (!parsed.problem.empty()) return bad(parsed.problem);
  if (!j.is_object()) return bad("the header is not a JSON object");
  const uint64_t data_size = file_size - 8 - header_len;

  struct Entry {
    uint64_t begin, end;
    size_t index;
  };
  TensorFile out;
  std::vector<Entry> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& e = it.value();
    if (name == "__metadata__") {
      if (e.is_null()) continue;
      if (!e.is_object()) return bad("__metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string())
          return bad(
              fmt::format("__metadata__ '{}' is {}, not a string", m.key(), json_type(m.value())));
        out.metadata[m.key()] = m.value().get<std::string>();
      }
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
    ranges.push_back({b, en, out.tensors.size()});
    out.tensors.push_back(std::move(t));
  }
  // The format's layout rule: in offset order, the tensors tile the data section exactly,
  // from its first byte to its last, with no gap, overlap or trailing bytes.
  std::sort(ranges.begin(), ranges.end(), [](const Entry& x, const Entry& y) {
    return std::tie(x.begin, x.end) < std::tie(y.begin, y.end);
  });
  uint64_t covered = 0;
  for (const auto& r : ranges) {
    const std::string& name = out.tensors[r.index].name;
    if (r.begin < covered)
      return bad(fmt::format("tensor '{}': its data [{}, {}) overlaps another tensor's", name,
                             r.begin, r.end));
    if (r.begin > covered)
      return bad(fmt::format("tensor '{}': its data starts at {}, leaving bytes [{}, {}) unused",
                             name, r.begin, covered, r.begin));
    covered = r.end;
  }
  if (covered != data_size)
    return bad(fmt::format("{} trailing bytes after the last tensor's data", data_size - covered));
  // The data: read straight into each tensor.
  for (const auto& r : ranges) {
    auto& data = out.tensors[r.index].data;
    data.resize(r.end - r.begin);
    in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size()));
    if (!in) return bad("could not read the data section");
  }
  return out;
}

namespace {

Expected<support::OutputFile> stage(const std::string& path, const TensorFile& file) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& t : file.tensors) {
    if (t.name == "__metadata__")
      return make_error("{}: a tensor cannot be named __metadata__", path);
    if (h.contains(t.name)) return make_error("{}: tensor '{}' is given twice", path, t.name);
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
  auto out = support::OutputFile::create(path);
  if (!out) return out.error();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  OPTJIT_TRY(out->write(len, 8));
  OPTJIT_TRY(out->write(header));
  for (const auto& t : file.tensors) OPTJIT_TRY(out->write(t.data.data(), t.data.size()));
  return out;
}

}  // namespace

Status write_safetensors(const std::string& path, const TensorFile& file) {
  auto out = stage(path, file);
  if (!out) return out.error();
  return out->commit();
}

Status write_safetensors(const std::vector<std::pair<std::string, const TensorFile*>>& files) {
  std::vector<support::OutputFile> staged;
  for (const auto& [path, file] : files) {
    auto out = stage(path, *file);
    if (!out) return out.error();
    staged.push_back(std::move(*out));
  }
  std::vector<support::OutputFile*> all;
  for (auto& f : staged) all.push_back(&f);
  return support::commit_all(all);
}

}  // namespace optjit::runtime
