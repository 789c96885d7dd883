#include "ir/quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace optjit::ir {

namespace {

// bitsandbytes.functional.create_dynamic_map(signed=True) and (signed=False), bit for bit
// (printed by tools/gen_dynamic_maps.py; checked against bitsandbytes by the Python tests).
constexpr std::array<float, 256> kDynamicSigned = {
    -0x1.fc66660000000p-1f,  -0x1.f533340000000p-1f,
    -0x1.ee00000000000p-1f,  -0x1.e6cccc0000000p-1f,
    -0x1.df999a0000000p-1f,  -0x1.d866660000000p-1f,
    -0x1.d133340000000p-1f,  -0x1.ca00000000000p-1f,
    -0x1.c2cccc0000000p-1f,  -0x1.bb999a0000000p-1f,
    -0x1.b466660000000p-1f,  -0x1.ad33340000000p-1f,
    -0x1.a600000000000p-1f,  -0x1.9ecccc0000000p-1f,
    -0x1.97999a0000000p-1f,  -0x1.9066660000000p-1f,
    -0x1.8933340000000p-1f,  -0x1.8200000000000p-1f,
    -0x1.7acccc0000000p-1f,  -0x1.73999a0000000p-1f,
    -0x1.6c66680000000p-1f,  -0x1.6533340000000p-1f,
    -0x1.5e00000000000p-1f,  -0x1.56cccc0000000p-1f,
    -0x1.4f999a0000000p-1f,  -0x1.4866680000000p-1f,
    -0x1.4133340000000p-1f,  -0x1.3a00000000000p-1f,
    -0x1.32cccc0000000p-1f,  -0x1.2b999a0000000p-1f,
    -0x1.2466680000000p-1f,  -0x1.1d33340000000p-1f,
    -0x1.1600000000000p-1f,  -0x1.0ecccc0000000p-1f,
    -0x1.0799980000000p-1f,  -0x1.0066660000000p-1f,
    -0x1.f266640000000p-2f,  -0x1.e400000000000p-2f,
    -0x1.d599980000000p-2f,  -0x1.c733340000000p-2f,
    -0x1.b8cccc0000000p-2f,  -0x1.aa66660000000p-2f,
    -0x1.9c00000000000p-2f,  -0x1.8d99980000000p-2f,
    -0x1.7f33340000000p-2f,  -0x1.70cccc0000000p-2f,
    -0x1.6266660000000p-2f,  -0x1.5400000000000p-2f,
    -0x1.4599980000000p-2f,  -0x1.3733340000000p-2f,
    -0x1.28cccc0000000p-2f,  -0x1.1a66680000000p-2f,
    -0x1.0c00000000000p-2f,  -0x1.fb33320000000p-3f,
    -0x1.de66660000000p-3f,  -0x1.c1999a0000000p-3f,
    -0x1.a4cccc0000000p-3f,  -0x1.8800000000000p-3f,
    -0x1.6b33340000000p-3f,  -0x1.4e66660000000p-3f,
    -0x1.31999a0000000p-3f,  -0x1.14cccc0000000p-3f,
    -0x1.f000000000000p-4f,  -0x1.b666680000000p-4f,
    -0x1.93d70a0000000p-4f,  -0x1.8851ee0000000p-4f,
    -0x1.7cccce0000000p-4f,  -0x1.7147ae0000000p-4f,
    -0x1.65c2900000000p-4f,  -0x1.5a3d700000000p-4f,
    -0x1.4eb8540000000p-4f,  -0x1.4333340000000p-4f,
    -0x1.37ae140000000p-4f,  -0x1.2c28f60000000p-4f,
    -0x1.20a3d60000000p-4f,  -0x1.151eba0000000p-4f,
    -0x1.09999a0000000p-4f,  -0x1.fc28f60000000p-5f,
    -0x1.e51eba0000000p-5f,  -0x1.ce147a0000000p-5f,
    -0x1.b70a3e0000000p-5f,  -0x1.a000000000000p-5f,
    -0x1.88f5c20000000p-5f,  -0x1.71eb860000000p-5f,
    -0x1.5ae1460000000p-5f,  -0x1.43d70a0000000p-5f,
    -0x1.2cccce0000000p-5f,  -0x1.15c2900000000p-5f,
    -0x1.fd70a40000000p-6f,  -0x1.cf5c2a0000000p-6f,
    -0x1.a147ae0000000p-6f,  -0x1.7333340000000p-6f,
    -0x1.451eba0000000p-6f,  -0x1.170a3e0000000p-6f,
    -0x1.d1eb860000000p-7f,  -0x1.75c2900000000p-7f,
    -0x1.3e76c80000000p-7f,  -0x1.2c08300000000p-7f,
    -0x1.19999a0000000p-7f,  -0x1.072b020000000p-7f,
    -0x1.e978d40000000p-8f,  -0x1.c49ba60000000p-8f,
    -0x1.9fbe760000000p-8f,  -0x1.7ae1480000000p-8f,
    -0x1.56041a0000000p-8f,  -0x1.3126e80000000p-8f,
    -0x1.0c49ba0000000p-8f,  -0x1.ced9140000000p-9f,
    -0x1.851eb80000000p-9f,  -0x1.3b645a0000000p-9f,
    -0x1.e353f80000000p-10f, -0x1.4fdf3a0000000p-10f,
    -0x1.eecbfe0000000p-11f, -0x1.b3d07c0000000p-11f,
    -0x1.78d5000000000p-11f, -0x1.3dd9820000000p-11f,
    -0x1.02de020000000p-11f, -0x1.8fc5060000000p-12f,
    -0x1.19ce0a0000000p-12f, -0x1.47ae160000000p-13f,
    -0x1.743e960000000p-14f, -0x1.15df660000000p-14f,
    -0x1.6f00680000000p-15f, -0x1.64840c0000000p-16f,
    -0x1.040bfe0000000p-17f, -0x1.b435280000000p-19f,
    -0x1.27476e0000000p-21f, 0x0.0p+0f,
    0x1.27476e0000000p-21f,  0x1.b435280000000p-19f,
    0x1.040bfe0000000p-17f,  0x1.64840c0000000p-16f,
    0x1.6f00680000000p-15f,  0x1.15df660000000p-14f,
    0x1.743e960000000p-14f,  0x1.47ae160000000p-13f,
    0x1.19ce0a0000000p-12f,  0x1.8fc5060000000p-12f,
    0x1.02de020000000p-11f,  0x1.3dd9820000000p-11f,
    0x1.78d5000000000p-11f,  0x1.b3d07c0000000p-11f,
    0x1.eecbfe0000000p-11f,  0x1.4fdf3a0000000p-10f,
    0x1.e353f80000000p-10f,  0x1.3b645a0000000p-9f,
    0x1.851eb80000000p-9f,   0x1.ced9140000000p-9f,
    0x1.0c49ba0000000p-8f,   0x1.3126e80000000p-8f,
    0x1.56041a0000000p-8f,   0x1.7ae1480000000p-8f,
    0x1.9fbe760000000p-8f,   0x1.c49ba60000000p-8f,
    0x1.e978d40000000p-8f,   0x1.072b020000000p-7f,
    0x1.19999a0000000p-7f,   0x1.2c08300000000p-7f,
    0x1.3e76c80000000p-7f,   0x1.75c2900000000p-7f,
    0x1.d1eb860000000p-7f,   0x1.170a3e0000000p-6f,
    0x1.451eba0000000p-6f,   0x1.7333340000000p-6f,
    0x1.a147ae0000000p-6f,   0x1.cf5c2a0000000p-6f,
    0x1.fd70a40000000p-6f,   0x1.15c2900000000p-5f,
    0x1.2cccce0000000p-5f,   0x1.43d70a0000000p-5f,
    0x1.5ae1460000000p-5f,   0x1.71eb860000000p-5f,
    0x1.88f5c20000000p-5f,   0x1.a000000000000p-5f,
    0x1.b70a3e0000000p-5f,   0x1.ce147a0000000p-5f,
    0x1.e51eba0000000p-5f,   0x1.fc28f60000000p-5f,
    0x1.09999a0000000p-4f,   0x1.151eba0000000p-4f,
    0x1.20a3d60000000p-4f,   0x1.2c28f60000000p-4f,
    0x1.37ae140000000p-4f,   0x1.4333340000000p-4f,
    0x1.4eb8540000000p-4f,   0x1.5a3d700000000p-4f,
    0x1.65c2900000000p-4f,   0x1.7147ae0000000p-4f,
    0x1.7cccce0000000p-4f,   0x1.8851ee0000000p-4f,
    0x1.93d70a0000000p-4f,   0x1.b666680000000p-4f,
    0x1.f000000000000p-4f,   0x1.14cccc0000000p-3f,
    0x1.31999a0000000p-3f,   0x1.4e66660000000p-3f,
    0x1.6b33340000000p-3f,   0x1.8800000000000p-3f,
    0x1.a4cccc0000000p-3f,   0x1.c1999a0000000p-3f,
    0x1.de66660000000p-3f,   0x1.fb33320000000p-3f,
    0x1.0c00000000000p-2f,   0x1.1a66680000000p-2f,
    0x1.28cccc0000000p-2f,   0x1.3733340000000p-2f,
    0x1.4599980000000p-2f,   0x1.5400000000000p-2f,
    0x1.6266660000000p-2f,   0x1.70cccc0000000p-2f,
    0x1.7f33340000000p-2f,   0x1.8d99980000000p-2f,
    0x1.9c00000000000p-2f,   0x1.aa66660000000p-2f,
    0x1.b8cccc0000000p-2f,   0x1.c733340000000p-2f,
    0x1.d599980000000p-2f,   0x1.e400000000000p-2f,
    0x1.f266640000000p-2f,   0x1.0066660000000p-1f,
    0x1.0799980000000p-1f,   0x1.0ecccc0000000p-1f,
    0x1.1600000000000p-1f,   0x1.1d33340000000p-1f,
    0x1.2466680000000p-1f,   0x1.2b999a0000000p-1f,
    0x1.32cccc0000000p-1f,   0x1.3a00000000000p-1f,
    0x1.4133340000000p-1f,   0x1.4866680000000p-1f,
    0x1.4f999a0000000p-1f,   0x1.56cccc0000000p-1f,
    0x1.5e00000000000p-1f,   0x1.6533340000000p-1f,
    0x1.6c66680000000p-1f,   0x1.73999a0000000p-1f,
    0x1.7acccc0000000p-1f,   0x1.8200000000000p-1f,
    0x1.8933340000000p-1f,   0x1.9066660000000p-1f,
    0x1.97999a0000000p-1f,   0x1.9ecccc0000000p-1f,
    0x1.a600000000000p-1f,   0x1.ad33340000000p-1f,
    0x1.b466660000000p-1f,   0x1.bb999a0000000p-1f,
    0x1.c2cccc0000000p-1f,   0x1.ca00000000000p-1f,
    0x1.d133340000000p-1f,   0x1.d866660000000p-1f,
    0x1.df999a0000000p-1f,   0x1.e6cccc0000000p-1f,
    0x1.ee00000000000p-1f,   0x1.f533340000000p-1f,
    0x1.fc66660000000p-1f,   0x1.0000000000000p+0f,
};
constexpr std::array<float, 256> kDynamicUnsigned = {
    0x0.0p+0f,
    0x1.5cf7540000000p-22f,
    0x1.a013300000000p-21f,
    0x1.1d36700000000p-19f,
    0x1.2599ec0000000p-18f,
    0x1.bc98a20000000p-18f,
    0x1.29cbaa0000000p-17f,
    0x1.0624dc0000000p-16f,
    0x1.c2e3400000000p-16f,
    0x1.3fd0d00000000p-15f,
    0x1.9e30000000000p-15f,
    0x1.fc8f340000000p-15f,
    0x1.2d77320000000p-14f,
    0x1.5ca6c80000000p-14f,
    0x1.8bd6620000000p-14f,
    0x1.0cb2960000000p-13f,
    0x1.82a9940000000p-13f,
    0x1.f8a0920000000p-13f,
    0x1.374bc80000000p-12f,
    0x1.7247440000000p-12f,
    0x1.ad42c60000000p-12f,
    0x1.e83e440000000p-12f,
    0x1.119ce20000000p-11f,
    0x1.2f1aa00000000p-11f,
    0x1.4c98600000000p-11f,
    0x1.6a16200000000p-11f,
    0x1.8793de0000000p-11f,
    0x1.a511a00000000p-11f,
    0x1.c28f5e0000000p-11f,
    0x1.e00d1c0000000p-11f,
    0x1.fd8adc0000000p-11f,
    0x1.2b020c0000000p-10f,
    0x1.74bc6a0000000p-10f,
    0x1.be76c80000000p-10f,
    0x1.0418940000000p-9f,
    0x1.28f5c20000000p-9f,
    0x1.4dd2f00000000p-9f,
    0x1.72b0200000000p-9f,
    0x1.978d4e0000000p-9f,
    0x1.bc6a800000000p-9f,
    0x1.e147ae0000000p-9f,
    0x1.03126e0000000p-8f,
    0x1.1581040000000p-8f,
    0x1.27ef9e0000000p-8f,
    0x1.3a5e340000000p-8f,
    0x1.4ccccc0000000p-8f,
    0x1.5f3b640000000p-8f,
    0x1.71a9fa0000000p-8f,
    0x1.8418940000000p-8f,
    0x1.96872a0000000p-8f,
    0x1.a8f5c20000000p-8f,
    0x1.bb645c0000000p-8f,
    0x1.cdd2f00000000p-8f,
    0x1.e0418a0000000p-8f,
    0x1.f2b01e0000000p-8f,
    0x1.028f5c0000000p-7f,
    0x1.0bc6a80000000p-7f,
    0x1.14fdf20000000p-7f,
    0x1.1e35400000000p-7f,
    0x1.276c8a0000000p-7f,
    0x1.30a3d60000000p-7f,
    0x1.39db240000000p-7f,
    0x1.43126e0000000p-7f,
    0x1.5eb8540000000p-7f,
    0x1.8cccce0000000p-7f,
    0x1.bae1460000000p-7f,
    0x1.e8f5c40000000p-7f,
    0x1.0b851e0000000p-6f,
    0x1.228f5e0000000p-6f,
    0x1.39999a0000000p-6f,
    0x1.50a3d60000000p-6f,
    0x1.67ae160000000p-6f,
    0x1.7eb8520000000p-6f,
    0x1.95c28e0000000p-6f,
    0x1.acccce0000000p-6f,
    0x1.c3d70e0000000p-6f,
    0x1.dae1460000000p-6f,
    0x1.f1eb860000000p-6f,
    0x1.047ae00000000p-5f,
    0x1.1000000000000p-5f,
    0x1.1b851e0000000p-5f,
    0x1.270a3e0000000p-5f,
    0x1.328f5e0000000p-5f,
    0x1.3e147a0000000p-5f,
    0x1.49999a0000000p-5f,
    0x1.551eb80000000p-5f,
    0x1.60a3d60000000p-5f,
    0x1.6c28f60000000p-5f,
    0x1.77ae140000000p-5f,
    0x1.8333340000000p-5f,
    0x1.8eb8500000000p-5f,
    0x1.9a3d700000000p-5f,
    0x1.a5c28e0000000p-5f,
    0x1.b147ae0000000p-5f,
    0x1.bcccce0000000p-5f,
    0x1.c851ee0000000p-5f,
    0x1.d3d70e0000000p-5f,
    0x1.df5c2a0000000p-5f,
    0x1.eae1460000000p-5f,
    0x1.f666660000000p-5f,
    0x1.00f5c40000000p-4f,
    0x1.06b8540000000p-4f,
    0x1.0c7ae20000000p-4f,
    0x1.123d700000000p-4f,
    0x1.1800000000000p-4f,
    0x1.1dc2900000000p-4f,
    0x1.2385200000000p-4f,
    0x1.2947ae0000000p-4f,
    0x1.2f0a3e0000000p-4f,
    0x1.34ccce0000000p-4f,
    0x1.3a8f5e0000000p-4f,
    0x1.4051ec0000000p-4f,
    0x1.46147c0000000p-4f,
    0x1.4bd70a0000000p-4f,
    0x1.51999a0000000p-4f,
    0x1.575c2a0000000p-4f,
    0x1.5d1eb80000000p-4f,
    0x1.62e1480000000p-4f,
    0x1.68a3d60000000p-4f,
    0x1.6e66660000000p-4f,
    0x1.7428f60000000p-4f,
    0x1.79eb860000000p-4f,
    0x1.7fae160000000p-4f,
    0x1.8570a40000000p-4f,
    0x1.8b33340000000p-4f,
    0x1.90f5c40000000p-4f,
    0x1.96b8520000000p-4f,
    0x1.a800000000000p-4f,
    0x1.c4cccc0000000p-4f,
    0x1.e1999a0000000p-4f,
    0x1.fe66660000000p-4f,
    0x1.0d99980000000p-3f,
    0x1.1c00000000000p-3f,
    0x1.2a66680000000p-3f,
    0x1.38cccc0000000p-3f,
    0x1.4733340000000p-3f,
    0x1.5599980000000p-3f,
    0x1.6400000000000p-3f,
    0x1.7266680000000p-3f,
    0x1.80cccc0000000p-3f,
    0x1.8f33340000000p-3f,
    0x1.9d99980000000p-3f,
    0x1.ac00000000000p-3f,
    0x1.ba66680000000p-3f,
    0x1.c8cccc0000000p-3f,
    0x1.d733340000000p-3f,
    0x1.e599980000000p-3f,
    0x1.f400000000000p-3f,
    0x1.0133320000000p-2f,
    0x1.0866660000000p-2f,
    0x1.0f999a0000000p-2f,
    0x1.16cccc0000000p-2f,
    0x1.1e00000000000p-2f,
    0x1.2533340000000p-2f,
    0x1.2c66660000000p-2f,
    0x1.3399980000000p-2f,
    0x1.3acccc0000000p-2f,
    0x1.4200000000000p-2f,
    0x1.4933340000000p-2f,
    0x1.5066660000000p-2f,
    0x1.5799980000000p-2f,
    0x1.5ecccc0000000p-2f,
    0x1.6600000000000p-2f,
    0x1.6d33340000000p-2f,
    0x1.7466660000000p-2f,
    0x1.7b99980000000p-2f,
    0x1.82cccc0000000p-2f,
    0x1.8a00000000000p-2f,
    0x1.9133340000000p-2f,
    0x1.9866660000000p-2f,
    0x1.9f99980000000p-2f,
    0x1.a6cccc0000000p-2f,
    0x1.ae00000000000p-2f,
    0x1.b533340000000p-2f,
    0x1.bc66660000000p-2f,
    0x1.c399980000000p-2f,
    0x1.cacccc0000000p-2f,
    0x1.d200000000000p-2f,
    0x1.d933340000000p-2f,
    0x1.e066660000000p-2f,
    0x1.e799980000000p-2f,
    0x1.eecccc0000000p-2f,
    0x1.f600000000000p-2f,
    0x1.fd33320000000p-2f,
    0x1.0233340000000p-1f,
    0x1.05cccc0000000p-1f,
    0x1.0966660000000p-1f,
    0x1.0d00000000000p-1f,
    0x1.1099980000000p-1f,
    0x1.1433340000000p-1f,
    0x1.17cccc0000000p-1f,
    0x1.1b66680000000p-1f,
    0x1.1f00000000000p-1f,
    0x1.22999a0000000p-1f,
    0x1.2633340000000p-1f,
    0x1.29cccc0000000p-1f,
    0x1.2d66680000000p-1f,
    0x1.3100000000000p-1f,
    0x1.34999a0000000p-1f,
    0x1.3833340000000p-1f,
    0x1.3bcccc0000000p-1f,
    0x1.3f66680000000p-1f,
    0x1.4300000000000p-1f,
    0x1.46999a0000000p-1f,
    0x1.4a33340000000p-1f,
    0x1.4dcccc0000000p-1f,
    0x1.5166680000000p-1f,
    0x1.5500000000000p-1f,
    0x1.58999a0000000p-1f,
    0x1.5c33340000000p-1f,
    0x1.5fcccc0000000p-1f,
    0x1.6366680000000p-1f,
    0x1.6700000000000p-1f,
    0x1.6a999a0000000p-1f,
    0x1.6e33340000000p-1f,
    0x1.71cccc0000000p-1f,
    0x1.7566680000000p-1f,
    0x1.7900000000000p-1f,
    0x1.7c999a0000000p-1f,
    0x1.8033340000000p-1f,
    0x1.83cccc0000000p-1f,
    0x1.8766680000000p-1f,
    0x1.8b00000000000p-1f,
    0x1.8e99980000000p-1f,
    0x1.9233340000000p-1f,
    0x1.95cccc0000000p-1f,
    0x1.9966680000000p-1f,
    0x1.9d00000000000p-1f,
    0x1.a099980000000p-1f,
    0x1.a433340000000p-1f,
    0x1.a7cccc0000000p-1f,
    0x1.ab66680000000p-1f,
    0x1.af00000000000p-1f,
    0x1.b299980000000p-1f,
    0x1.b633340000000p-1f,
    0x1.b9cccc0000000p-1f,
    0x1.bd66680000000p-1f,
    0x1.c100000000000p-1f,
    0x1.c499980000000p-1f,
    0x1.c833340000000p-1f,
    0x1.cbcccc0000000p-1f,
    0x1.cf66680000000p-1f,
    0x1.d300000000000p-1f,
    0x1.d699980000000p-1f,
    0x1.da33340000000p-1f,
    0x1.ddcccc0000000p-1f,
    0x1.e166680000000p-1f,
    0x1.e500000000000p-1f,
    0x1.e899980000000p-1f,
    0x1.ec33340000000p-1f,
    0x1.efcccc0000000p-1f,
    0x1.f366680000000p-1f,
    0x1.f700000000000p-1f,
    0x1.fa99980000000p-1f,
    0x1.fe33340000000p-1f,
    0x1.0000000000000p+0f,
};

// lut[i] = the code nearest to -1 + 2i/65535, computed in f32 as bitsandbytes builds it.
std::array<uint8_t, kQuantLutSize> make_lut(const std::array<float, 256>& map) {
  std::array<float, 255> mid{};
  for (int i = 0; i < 255; ++i) mid[i] = 0.5f * (map[i] + map[i + 1]);
  std::array<uint8_t, kQuantLutSize> lut{};
  int code = 0;
  for (int i = 0; i < kQuantLutSize; ++i) {
    const float v = -1.0f + (2.0f * static_cast<float>(i)) / static_cast<float>(kQuantLutSize - 1);
    while (code < 255 && mid[code] < v) ++code;
    lut[i] = static_cast<uint8_t>(code);
  }
  return lut;
}

const std::array<uint8_t, kQuantLutSize> kLutSigned = make_lut(kDynamicSigned);
const std::array<uint8_t, kQuantLutSize> kLutUnsigned = make_lut(kDynamicUnsigned);

CompactLut make_compact(const std::array<uint8_t, kQuantLutSize>& lut) {
  constexpr uint32_t kBuckets = kQuantLutSize / 32;
  auto simple = [&](uint32_t b) {  // the code steps at most once, by one
    int steps = 0;
    for (uint32_t k = 1; k < 32; ++k) {
      const int d = lut[32 * b + k] - lut[32 * b + k - 1];
      if (d > 1) return false;
      steps += d;
    }
    return steps <= 1;
  };
  CompactLut c;
  c.near_lo = kBuckets;
  for (uint32_t b = 0; b < kBuckets; ++b)
    if (!simple(b)) c.near_lo = std::min(c.near_lo, b), c.near_hi = b + 1;
  if (c.near_lo > c.near_hi) c.near_lo = c.near_hi = 0;
  auto bucket_entry = [&](uint32_t b) {
    uint32_t step = 32;
    for (uint32_t k = 1; k < 32; ++k)
      if (lut[32 * b + k] != lut[32 * b + k - 1]) step = k;
    return 32u * lut[32 * b] + (32u - step) - 32u * b;
  };
  for (uint32_t b = 0; b < c.near_lo; ++b) c.entries.push_back(bucket_entry(b));
  for (uint32_t i = 32 * c.near_lo; i < 32 * c.near_hi; ++i) c.entries.push_back(32u * lut[i] - i);
  for (uint32_t b = c.near_hi; b < kBuckets; ++b) c.entries.push_back(bucket_entry(b));
  for (uint32_t i = 0; i < kQuantLutSize; ++i)
    if (c.code(i) != lut[i]) std::abort();  // the construction above is wrong: never ship it
  return c;
}

const CompactLut kCompactSigned = make_compact(kLutSigned);
const CompactLut kCompactUnsigned = make_compact(kLutUnsigned);

// float8_e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; 0x7f and 0xff
// are NaN; the largest finite value is 448.
std::array<float, 256> make_e4m3() {
  std::array<float, 256> v{};
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 15, m = c & 7;
    float x = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                     : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
    if ((c & 127) == 127) x = std::numeric_limits<float>::quiet_NaN();
    v[c] = (c & 128) ? -x : x;
  }
  return v;
}
const std::array<float, 256> kE4m3 = make_e4m3();

// torchao's 4-bit maps (optim/subclass_4bit.py): create_dynamic_map(True, 3, 4) and
// linspace(0, 1, 17)[1:], as float32 (printed from torchao by tools/gen_dynamic_maps.py;
// checked against the installed torchao by the Python tests).
constexpr std::array<float, 16> kFourBitSigned = {
    -0x1.c666660000000p-1f, -0x1.5333340000000p-1f, -0x1.c000000000000p-2f, -0x1.b333320000000p-3f,
    -0x1.3d70a40000000p-4f, -0x1.0a3d720000000p-5f, -0x1.6872b00000000p-8f, 0x0.0p+0f,
    0x1.6872b00000000p-8f,  0x1.0a3d720000000p-5f,  0x1.3d70a40000000p-4f,  0x1.b333320000000p-3f,
    0x1.c000000000000p-2f,  0x1.5333340000000p-1f,  0x1.c666660000000p-1f,  0x1.0000000000000p+0f,
};
constexpr std::array<float, 16> kFourBitUnsigned = {
    0x1.0000000000000p-4f, 0x1.0000000000000p-3f, 0x1.8000000000000p-3f, 0x1.0000000000000p-2f,
    0x1.4000000000000p-2f, 0x1.8000000000000p-2f, 0x1.c000000000000p-2f, 0x1.0000000000000p-1f,
    0x1.2000000000000p-1f, 0x1.4000000000000p-1f, 0x1.6000000000000p-1f, 0x1.8000000000000p-1f,
    0x1.a000000000000p-1f, 0x1.c000000000000p-1f, 0x1.e000000000000p-1f, 0x1.0000000000000p+0f,
};

// torchao's rounding of y between map[c] and map[c + 1], in f32 as its kernels compute it.
bool rounds_up(const std::array<float, 16>& map, int c, float y) {
  if (y >= map[c + 1]) return true;
  if (!(y >= map[c])) return false;
  const float residual = y - map[c];
  const float half = (map[c + 1] - map[c]) * 0.5f;
  return residual >= half;
}

// f32 values in order as unsigned integers (negative ones below positive ones), and back.
uint32_t ordered(float f) {
  const uint32_t b = std::bit_cast<uint32_t>(f);
  return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}
float from_ordered(uint32_t k) {
  return std::bit_cast<float>((k & 0x80000000u) ? k & 0x7fffffffu : ~k);
}

// t[c]: the least f32 that torchao's rule takes to code c + 1 or above, found by bisection on
// the floats between map[c] and map[c + 1] (the rule is monotone there and true at the top).
std::array<float, 15> make_thresholds(const std::array<float, 16>& map) {
  std::array<float, 15> t{};
  for (int c = 0; c < 15; ++c) {
    uint32_t lo = ordered(map[c]), hi = ordered(map[c + 1]);  // rounds_up(hi) holds
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2;
      if (rounds_up(map, c, from_ordered(mid)))
        hi = mid;
      else
        lo = mid + 1;
    }
    t[c] = from_ordered(hi);
  }
  return t;
}
const std::array<float, 15> kThresholdsSigned = make_thresholds(kFourBitSigned);
const std::array<float, 15> kThresholdsUnsigned = make_thresholds(kFourBitUnsigned);

// One row per format (ir::Quant's order); the kernels and the planner read only these columns.
const QuantInfo kTable[] = {
    {.name = "none",
     .description = "not quantized",
     .kind = QuantKind::table,
     .bits = 32,
     .block = kQuantBlock,
     .min_elements = 0,
     .whole_blocks = false},
    {.name = "q8",
     .description = "8-bit blockwise, bitsandbytes' signed dynamic map",
     .kind = QuantKind::table,
     .map = kDynamicSigned,
     .lut = &kLutSigned,
     .compact = &kCompactSigned,
     .bits = 8,
     .block = 256,
     .min_elements = kQuantMinElements,
     .whole_blocks = false},
    {.name = "q8u",
     .description = "8-bit blockwise, bitsandbytes' unsigned dynamic map (values >= 0)",
     .kind = QuantKind::table,
     .map = kDynamicUnsigned,
     .lut = &kLutUnsigned,
     .compact = &kCompactUnsigned,
     .bits = 8,
     .block = 256,
     .min_elements = kQuantMinElements,
     .whole_blocks = false},
    {.name = "f8",
     .description = "fp8 e4m3 blockwise, torchao's AdamWFp8",
     .kind = QuantKind::fp8,
     .map = kE4m3,
     .bits = 8,
     .block = 256,
     .min_elements = kQuantMinElements,
     .whole_blocks = true},
    {.name = "q4",
     .description = "4-bit blockwise (128), torchao's AdamW4bit signed dynamic map",
     .kind = QuantKind::nearest,
     .map = kFourBitSigned,
     .thresholds = kThresholdsSigned,
     .bits = 4,
     .block = 128,
     .min_elements = kQuantMinElements,
     .whole_blocks = true},
    {.name = "q4u",
     .description = "4-bit blockwise (128), torchao's AdamW4bit unsigned linear map (values > 0)",
     .kind = QuantKind::nearest,
     .map = kFourBitUnsigned,
     .thresholds = kThresholdsUnsigned,
     .bits = 4,
     .block = 128,
     .min_elements = kQuantMinElements,
     .whole_blocks = true},
    {.name = "q4_b256",
     .description = "4-bit blockwise (256), torchao's AdamW4bit(block_size=256) signed dynamic map",
     .kind = QuantKind::nearest,
     .map = kFourBitSigned,
     .thresholds = kThresholdsSigned,
     .bits = 4,
     .block = 256,
     .min_elements = kQuantMinElements,
     .whole_blocks = true},
    {.name = "q4u_b256",
     .description =
         "4-bit blockwise (256), torchao's AdamW4bit(block_size=256) unsigned linear map "
         "(values > 0)",
     .kind = QuantKind::nearest,
     .map = kFourBitUnsigned,
     .thresholds = kThresholdsUnsigned,
     .bits = 4,
     .block = 256,
     .min_elements = kQuantMinElements,
     .whole_blocks = true},
};

}  // namespace

const QuantInfo& info(Quant q) { return kTable[static_cast<size_t>(q)]; }
std::string_view to_string(Quant q) { return info(q).name; }

bool unsigned_map(Quant q) {
  const auto map = info(q).map;
  return q != Quant::none && std::none_of(map.begin(), map.end(), [](float v) { return v < 0; });
}

bool quantized_tensor(Quant q, int64_t numel) {
  const QuantInfo& i = info(q);
  return numel >= i.min_elements && (!i.whole_blocks || numel % i.block == 0);
}

bool linear_map(std::span<const float> map) {
  for (size_t c = 0; c < map.size(); ++c)
    if (map[c] != static_cast<float>(c + 1) * map[0]) return false;
  return !map.empty();
}

bool linear_thresholds(const QuantInfo& q) {
  if (q.kind != QuantKind::nearest || !linear_map(q.map)) return false;
  const float m = q.map[0];
  int e = 0;
  if (!(m > 0.0f) || std::frexp(m, &e) != 0.5f) return false;  // a power of two
  if (q.thresholds.size() + 1 != q.map.size()) return false;
  for (size_t k = 0; k < q.thresholds.size(); ++k)
    if (q.thresholds[k] != static_cast<float>((static_cast<double>(k) + 1.5) * m)) return false;
  return true;
}

uint8_t nearest_code_exact(Quant q, double y) {
  const std::span<const float> map = info(q).map;
  const int top = static_cast<int>(map.size()) - 1;
  int c = 0;  // the last code whose value is <= y (0 below the first, and for NaN)
  while (c < top && y >= map[c + 1]) ++c;
  if (c < top && y - map[c] >= (static_cast<double>(map[c + 1]) - map[c]) * 0.5) ++c;
  return static_cast<uint8_t>(c);
}

uint8_t f8_code_exact(double y) {
  if (!(std::fabs(y) < 464.0)) return std::signbit(y) && y == y ? 0xff : 0x7f;
  // The nearest e4m3 value, ties to even (an even code has an even mantissa), by a search of
  // the 127 non-negative finite values.
  const double a = std::fabs(y);
  int best = 0;
  for (int c = 1; c < 127; ++c) {
    const double d = std::fabs(a - kE4m3[c]), b = std::fabs(a - kE4m3[best]);
    if (d < b || (d == b && (c & 1) == 0)) best = c;
  }
  return static_cast<uint8_t>(best | (std::signbit(y) ? 128 : 0));
}

std::vector<Quant> quant_formats() {
  std::vector<Quant> out;
  for (size_t i = 1; i < std::size(kTable); ++i) out.push_back(static_cast<Quant>(i));
  return out;
}

std::string quant_names() {
  std::string out;
  for (Quant q : quant_formats()) out += (out.empty() ? "" : ", ") + std::string(to_string(q));
  return out;
}

std::optional<Quant> parse_quant(std::string_view s) {
  for (Quant q : quant_formats())
    if (to_string(q) == s) return q;
  return std::nullopt;
}

}  // namespace optjit::ir
