#include "runtime/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "test_dir.h"

#include <nlohmann/json.hpp>

namespace optjit::runtime {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir("st"); }
  void TearDown() override { test::remove_test_dir(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  void write_raw(const std::string& p, const std::string& header, const std::string& data) {
    std::ofstream out(p, std::ios::binary);
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header << data;
  }
  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndMetadata) {
  TensorFile f;
  for (DType t : kAllDTypes) {
    HostTensor h = HostTensor::zeros(std::string("t_") + std::string(to_string(t)), t, {2, 3});
    for (int i = 0; i < 6; ++i) h.set(i, i * 0.75 - 1);
    f.tensors.push_back(h);
  }
  f.tensors.push_back(HostTensor::zeros("empty", DType::f32, {0, 4}));
  f.tensors.push_back(HostTensor::zeros("scalar", DType::f64, {}));
  f.metadata["k"] = "v";
  ASSERT_TRUE(write_safetensors(path("a.safetensors"), f));
  auto back = read_safetensors(path("a.safetensors"));
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_EQ(back->tensors.size(), f.tensors.size());
  for (const auto& t : f.tensors) {
    const HostTensor* b = back->find(t.name);
    ASSERT_TRUE(b) << t.name;
    EXPECT_EQ(b->dtype, t.dtype);
    EXPECT_EQ(b->shape, t.shape);
    EXPECT_EQ(b->data, t.data);
  }
  EXPECT_EQ(back->metadata.at("k"), "v");
  EXPECT_EQ(back->find("t_f16")->get(5), 2.75);
}

TEST_F(SafetensorsTest, RejectsBrokenFilesWithReasons) {
  auto err = [&](const std::string& name) {
    auto r = read_safetensors(path(name));
    EXPECT_FALSE(r);
    return r ? std::string() : r.error().message;
  };
  std::ofstream(path("short")) << "abc";
  EXPECT_EQ(
      err("short"),
      path("short") + ": not a valid safetensors file: shorter than its 8-byte header length");
  write_raw(path("huge_header"), "{}", "");
  {
    std::fstream f(path("huge_header"), std::ios::in | std::ios::out | std::ios::binary);
    f.put(static_cast<char>(0xff));
  }
  EXPECT_NE(err("huge_header").find("header length 255 does not fit in a file of 10 bytes"),
            std::string::npos);
  write_raw(path("notjson"), "{\"a\": ", "");
  EXPECT_NE(err("notjson").find("the header is not JSON"), std::string::npos);
  write_raw(path("dtype"), R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})", "x");
  EXPECT_NE(err("dtype").find("tensor 'w' has dtype I8, which optjit does not support"),
            std::string::npos);
  write_raw(path("range"), R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "1234");
  EXPECT_NE(err("range").find("tensor 'w': data_offsets [0, 8] fall outside the 4 data bytes"),
            std::string::npos);
  write_raw(path("size"), R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678");
  EXPECT_NE(err("size").find("tensor 'w': 8 bytes of data for 3 elements of F32"),
            std::string::npos);
  write_raw(
      path("overlap"),
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
      "12345678");
  EXPECT_NE(err("overlap").find("tensor 'b': its data [2, 6) overlaps another tensor's"),
            std::string::npos);
  write_raw(path("neg"), R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", "");
  EXPECT_NE(err("neg").find("shape has a non-integer or negative size"), std::string::npos);
  EXPECT_NE(err("missing").find("cannot open"), std::string::npos);
}

// Hand-made files, valid and broken, each with the verdict of the reference `safetensors`
// library (tests/torch/make_safetensors_cases.py): optjit reads what it reads, to the same
// values, and rejects what it rejects, except the few cases where optjit is stricter on
// purpose (a name given twice, even with the same entry), which name optjit's message.
TEST_F(SafetensorsTest, AgreesWithTheReferenceLibraryOnEveryCase) {
  const fs::path dir = fs::path(OPTJIT_SOURCE_DIR) / "tests/fixtures/safetensors";
  std::ifstream in(dir / "verdicts.json");
  ASSERT_TRUE(in);
  const auto cases = nlohmann::json::parse(in)["cases"];
  ASSERT_GE(cases.size(), 40u);
  size_t accepted = 0, rejected = 0;
  for (const auto& [name, v] : cases.items()) {
    SCOPED_TRACE(name);
    const std::string file = (dir / (name + ".safetensors")).string();
    auto r = read_safetensors(file);
    const bool reference_accepts = v["reference"] == "accepts";
    if (v.contains("optjit_rejects")) {
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error().message,
                file + ": not a valid safetensors file: " + v["optjit_rejects"].get<std::string>());
      ++rejected;
      continue;
    }
    if (!reference_accepts) {
      EXPECT_FALSE(r) << "the reference says: " << v["error"];
      if (!r) {
        EXPECT_EQ(r.error().message.rfind(file + ": ", 0), 0u) << r.error().message;
      }
      ++rejected;
      continue;
    }
    ASSERT_TRUE(r) << r.error().message;
    ++accepted;
    EXPECT_EQ(r->tensors.size(), v["tensors"].size());
    for (const auto& [tname, t] : v["tensors"].items()) {
      const HostTensor* h = r->find(tname);
      ASSERT_TRUE(h) << tname;
      EXPECT_EQ(h->shape, t["shape"].get<std::vector<int64_t>>()) << tname;
      const auto values = t["values"].get<std::vector<double>>();
      ASSERT_EQ(static_cast<size_t>(h->numel()), values.size()) << tname;
      for (size_t i = 0; i < values.size(); ++i)
        EXPECT_EQ(h->get(static_cast<int64_t>(i)), values[i]) << tname << "[" << i << "]";
    }
    std::map<std::string, std::string> meta = v["metadata"];
    EXPECT_EQ(r->metadata, meta);
  }
  EXPECT_GE(accepted, 10u);
  EXPECT_GE(rejected, 30u);
}

// What optjit says about each class of broken file: the cause, named.
TEST_F(SafetensorsTest, LayoutAndHeaderErrorsNameTheCause) {
  const fs::path dir = fs::path(OPTJIT_SOURCE_DIR) / "tests/fixtures/safetensors";
  auto err = [&](const std::string& name) {
    const std::string file = (dir / (name + ".safetensors")).string();
    auto r = read_safetensors(file);
    if (r) return std::string("accepted");
    const std::string prefix = file + ": not a valid safetensors file: ";
    const std::string& m = r.error().message;
    return m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m;
  };
  EXPECT_EQ(err("gap_between"), "tensor 'b': its data starts at 8, leaving bytes [4, 8) unused");
  EXPECT_EQ(err("gap_before_first"),
            "tensor 'a': its data starts at 4, leaving bytes [0, 4) unused");
  EXPECT_EQ(err("trailing_bytes"), "4 trailing bytes after the last tensor's data");
  EXPECT_EQ(err("trailing_bytes_no_tensor"), "2 trailing bytes after the last tensor's data");
  EXPECT_EQ(err("overlap"), "tensor 'b': its data [4, 8) overlaps another tensor's");
  EXPECT_EQ(err("duplicate_name_other_data"), "'a' appears twice");
  EXPECT_EQ(err("duplicate_field"), "'dtype' appears twice in the entry of 'a'");
  EXPECT_EQ(err("duplicate_metadata"), "'__metadata__' appears twice");
  EXPECT_EQ(err("metadata_integer"), "__metadata__ 'x' is number, not a string");
  EXPECT_EQ(err("metadata_null_value"), "__metadata__ 'x' is null, not a string");
  EXPECT_EQ(err("metadata_list"), "__metadata__ 'x' is array, not a string");
  EXPECT_EQ(err("shape_nested"), "tensor 'a': shape has a non-integer or negative size");
  EXPECT_EQ(err("length_too_large"), "header length 100000001 does not fit in a file of 10 bytes");
  {  // A file large enough for such a header (sparse): the format's limit is the cause.
    write_raw(path("big_header"), "{}", "");
    std::fstream f(path("big_header"), std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t n = 100'000'001;
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
    f.close();
    fs::resize_file(path("big_header"), 8 + n + 100);
    auto r = read_safetensors(path("big_header"));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().message, path("big_header") +
                                     ": not a valid safetensors file: its header length 100000001 "
                                     "is over the format's limit of 100000000 bytes");
  }
  EXPECT_EQ(err("header_empty"), "the header is empty");
  EXPECT_EQ(err("header_trailing_nul"), "the header is not JSON (a NUL byte at 54)");
  EXPECT_EQ(err("header_not_utf8"), "the header is not JSON");
  // Deeper nesting than the format has: rejected without building it.
  write_raw(path("deep"), "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}",
            "");
  auto deep = read_safetensors(path("deep"));
  ASSERT_FALSE(deep);
  EXPECT_NE(deep.error().message.find("the header nests deeper than the format does (under 'a')"),
            std::string::npos)
      << deep.error().message;
  // A directory is named as one.
  auto d = read_safetensors(dir_.string());
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().message, dir_.string() + ": is a directory; optjit reads only regular files");
  // A FIFO was opened and waited on forever; a device (/dev/zero) read as "shorter than its
  // 8-byte header length".
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  for (const auto& [special, kind] : {std::pair{path("fifo"), "a FIFO"},
                                      std::pair{std::string("/dev/zero"), "a character device"}}) {
    auto f = read_safetensors(special);
    ASSERT_FALSE(f);
    EXPECT_EQ(f.error().message, special + ": is " + kind + "; optjit reads only regular files");
  }
}

// The writer refuses what the reader would: a name given twice, or the reserved name.
TEST_F(SafetensorsTest, WriterRefusesDuplicateAndReservedNames) {
  TensorFile f;
  f.tensors.push_back(HostTensor::zeros("w", DType::f32, {1}));
  f.tensors.push_back(HostTensor::zeros("w", DType::f32, {2}));
  Status st = write_safetensors(path("dup.safetensors"), f);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, path("dup.safetensors") + ": tensor 'w' is given twice");
  f.tensors[1].name = "__metadata__";
  st = write_safetensors(path("dup.safetensors"), f);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message,
            path("dup.safetensors") + ": a tensor cannot be named __metadata__");
  EXPECT_FALSE(fs::exists(path("dup.safetensors")));
}

TEST_F(SafetensorsTest, FailedWriteLeavesTheOldFileIntact) {
  TensorFile f;
  f.tensors.push_back(HostTensor::zeros("w", DType::f32, {4}));
  ASSERT_TRUE(write_safetensors(path("keep.safetensors"), f));
  auto before = read_safetensors(path("keep.safetensors"));
  ASSERT_TRUE(before);
  TensorFile bad;
  HostTensor broken = HostTensor::zeros("w", DType::f32, {4});
  broken.data.resize(3);  // inconsistent: rejected before anything is written
  bad.tensors.push_back(broken);
  EXPECT_FALSE(write_safetensors(path("keep.safetensors"), bad));
  auto after = read_safetensors(path("keep.safetensors"));
  ASSERT_TRUE(after);
  EXPECT_EQ(after->tensors[0].data, before->tensors[0].data);
  // A directory that does not exist: an error, and no stray temporary files.
  Status st = write_safetensors(path("nodir/x.safetensors"), f);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("nodir/x.safetensors: the directory " + path("nodir") +
                                    " does not exist"),
            std::string::npos)
      << st.error().message;
  size_t files = 0;
  for (auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
}

}  // namespace
}  // namespace optjit::runtime
