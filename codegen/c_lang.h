// The C-family languages' differences (CUDA C and OpenCL C), shared by the emitter's pass
// kernels and its device-step kernels. Internal to codegen/.
#pragma once

#include <cmath>
#include <string>

#include "codegen/c_emitter.h"

namespace optjit::codegen::detail {

struct Lang {
  CLanguage id;
  bool cl() const { return id == CLanguage::opencl; }
  const char* kernel() const { return cl() ? "__kernel void" : "extern \"C\" __global__ void"; }
  const char* global() const { return cl() ? "__global " : ""; }
  const char* local() const { return cl() ? "__local " : "__shared__ "; }
  const char* i64() const { return cl() ? "long" : "long long"; }
  const char* u32() const { return cl() ? "uint" : "unsigned int"; }
  const char* u64() const { return cl() ? "ulong" : "unsigned long long"; }
  const char* group_id() const { return cl() ? "get_group_id(0)" : "blockIdx.x"; }
  const char* groups() const { return cl() ? "get_num_groups(0)" : "gridDim.x"; }
  const char* local_id() const { return cl() ? "get_local_id(0)" : "threadIdx.x"; }
  const char* local_size() const { return cl() ? "get_local_size(0)" : "blockDim.x"; }
  const char* barrier() const { return cl() ? "barrier(CLK_LOCAL_MEM_FENCE)" : "__syncthreads()"; }
  std::string value_type(DType t) const {
    switch (t) {
      case DType::f64:
        return "double";
      case DType::i64:
        return i64();
      case DType::b1:
        return "bool";
      default:
        return "float";
    }
  }
  std::string storage_type(DType t) const {
    switch (t) {
      case DType::f64:
        return "double";
      case DType::f32:
        return "float";
      case DType::f16:
      case DType::bf16:
        return cl() ? "ushort" : "unsigned short";
      case DType::i64:
        return i64();
      case DType::b1:
        return cl() ? "uchar" : "unsigned char";
    }
    return "?";
  }
  const char* global_id() const {
    return cl() ? "get_global_id(0)" : "(blockIdx.x * (long long)blockDim.x + threadIdx.x)";
  }
  // Math by name: OpenCL's are overloaded; CUDA's float forms end in f.
  std::string math(const char* name, DType t) const {
    if (cl() || t == DType::f64) return name;
    return std::string(name) + "f";
  }
};

/// A constant of type t, exactly (hex floats for floats).
std::string literal(double x, DType t);

/// The device-step kernels (DeviceStepLayout), appended to the pass kernels' source.
Expected<std::string> emit_device_step(const plan::Plan& plan, const Lang& L);

}  // namespace optjit::codegen::detail
