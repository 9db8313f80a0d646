// Shared device functions: storage-type conversions and small reductions.
// Self-contained so NVRTC can compile it (only CUDA headers are included).
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "pdl.cuh"
#if defined(__CUDACC_RTC__)
// NVRTC has no C library headers; these are the widths every CUDA target uses.
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
#else
#include <stdint.h>
#endif
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace revolta {

// Storage tags for the KV cache element types (fp8 is storage only; sm_70 has no fp8 math).
struct fp8_e4m3 { uint8_t bits; };
struct fp8_e5m2 { uint8_t bits; };

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
// bf16 is storage only here: widening is a 16-bit shift, no bf16 arithmetic (sm_70 has none).
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __uint_as_float(static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&x)) << 16);
}

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  // Round to nearest even by integer arithmetic (valid on every arch); NaN stays NaN.
  uint32_t u = __float_as_uint(x);
  uint16_t r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r = static_cast<uint16_t>((u >> 16) | 0x40u);
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    r = static_cast<uint16_t>(u >> 16);
  }
  return *reinterpret_cast<__nv_bfloat16*>(&r);
}

// fp8 -> fp16 by bit placement: e5m2 is the top byte of an fp16; e4m3 lands 8 binades low and is
// exact after a multiply by 256 (its range, 448 .. 2^-9, fits fp16 exactly).
__device__ __forceinline__ __half2 e5m2x2_to_half2(uint16_t two) {
  uint32_t lo = (two & 0xffu) << 8, hi = (two & 0xff00u);
  uint32_t v = lo | (hi << 16);
  return *reinterpret_cast<__half2*>(&v);
}
__device__ __forceinline__ __half2 e4m3x2_to_half2(uint16_t two) {
  uint32_t b0 = two & 0xffu, b1 = (two >> 8) & 0xffu;
  uint32_t h0 = ((b0 & 0x80u) << 8) | ((b0 & 0x7fu) << 7);
  uint32_t h1 = ((b1 & 0x80u) << 8) | ((b1 & 0x7fu) << 7);
  uint32_t v = h0 | (h1 << 16);
  __half2 h = *reinterpret_cast<__half2*>(&v);
  return __hmul2(h, __floats2half2_rn(256.f, 256.f));
}

__device__ __forceinline__ float e4m3_to_float(uint8_t b) {
  uint16_t two = b;
  return __low2float(e4m3x2_to_half2(two));
}
__device__ __forceinline__ float e5m2_to_float(uint8_t b) {
  uint16_t two = b;
  return __low2float(e5m2x2_to_half2(two));
}

// float -> fp8 with the same rounding as torch's CPU/GPU cast (round to nearest even, out of range
// becomes NaN for e4m3fn and inf for e5m2), so cached values match the reference bit for bit.
__device__ __forceinline__ uint8_t float_to_e4m3(float x) {
  uint32_t f = __float_as_uint(x);
  uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint8_t r;
  if (f >= (1087u << 20)) {
    r = 0x7f;
  } else if (f < (121u << 23)) {
    const uint32_t denorm = 141u << 23;
    f = __float_as_uint(__fadd_rn(__uint_as_float(f), __uint_as_float(denorm)));
    r = static_cast<uint8_t>(f - denorm);
  } else {
    uint32_t odd = (f >> 20) & 1u;
    f += (static_cast<uint32_t>(7 - 127) << 23) + 0x7ffffu;
    f += odd;
    r = static_cast<uint8_t>(f >> 20);
  }
  return r | static_cast<uint8_t>(sign >> 24);
}
__device__ __forceinline__ uint8_t float_to_e5m2(float x) {
  uint32_t f = __float_as_uint(x);
  uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint8_t r;
  if (f >= (143u << 23)) {
    r = f > (255u << 23) ? 0x7f : 0x7c;
  } else if (f < (113u << 23)) {
    const uint32_t denorm = 134u << 23;
    f = __float_as_uint(__fadd_rn(__uint_as_float(f), __uint_as_float(denorm)));
    r = static_cast<uint8_t>(f - denorm);
  } else {
    uint32_t odd = (f >> 21) & 1u;
    f += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffffu;
    f += odd;
    r = static_cast<uint8_t>(f >> 21);
  }
  return r | static_cast<uint8_t>(sign >> 24);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; `scratch` holds 32 floats. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.f;
  return warp_sum(v);
}

// Eight fp16 values (one 16-byte chunk of a row) as floats.
__device__ __forceinline__ void half8_to_float(const uint4& chunk, float* out) {
  const uint32_t w[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

}  // namespace revolta
