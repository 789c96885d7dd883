#include "runtime/safetensors.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace optjit::runtime {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("optjit_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
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
  EXPECT_NE(err("notjson").find("the header is not a JSON object"), std::string::npos);
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
  EXPECT_NE(err("overlap").find("two tensors' data overlap"), std::string::npos);
  write_raw(path("neg"), R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", "");
  EXPECT_NE(err("neg").find("shape has a non-integer or negative size"), std::string::npos);
  EXPECT_NE(err("missing").find("cannot open"), std::string::npos);
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
  EXPECT_NE(st.error().message.find("cannot create"), std::string::npos);
  size_t files = 0;
  for (auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
}

}  // namespace
}  // namespace optjit::runtime
