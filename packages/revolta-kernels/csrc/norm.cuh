// RMSNorm, fused residual-add + RMSNorm and SiLU-and-mul: one block per row, fp32 math, any of
// fp16/bf16/fp32 storage. These are memory-bound; the reads are coalesced and each row is read twice
// (second read from L1/L2).
#pragma once

#include "common.cuh"

namespace revolta {

template <typename T>
__global__ void rms_norm_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
                                float eps, int hidden, bool zero_centered) {
  __shared__ float scratch[32];
  const size_t base = static_cast<size_t>(blockIdx.x) * hidden;
  float ss = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float v = to_float(x[base + i]);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(hidden) + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    float wv = to_float(w[i]);
    if (zero_centered) wv += 1.f;
    out[base + i] = from_float<T>(to_float(x[base + i]) * inv * wv);
  }
}

// residual_out = x + residual (rounded to T, as the reference does); out = rms_norm(residual_out).
template <typename T>
__global__ void fused_add_rms_norm_kernel(T* __restrict__ out, T* __restrict__ residual_out,
                                          const T* __restrict__ x, const T* __restrict__ residual,
                                          const T* __restrict__ w, float eps, int hidden, bool zero_centered) {
  __shared__ float scratch[32];
  const size_t base = static_cast<size_t>(blockIdx.x) * hidden;
  float ss = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const T s = from_float<T>(to_float(x[base + i]) + to_float(residual[base + i]));
    residual_out[base + i] = s;
    const float v = to_float(s);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(hidden) + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    float wv = to_float(w[i]);
    if (zero_centered) wv += 1.f;
    out[base + i] = from_float<T>(to_float(residual_out[base + i]) * inv * wv);
  }
}

// out[r, i] = silu(x[r, i]) * x[r, d + i]
template <typename T>
__global__ void silu_and_mul_kernel(T* __restrict__ out, const T* __restrict__ x, int d) {
  const size_t in = static_cast<size_t>(blockIdx.x) * 2 * d, o = static_cast<size_t>(blockIdx.x) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float g = to_float(x[in + i]);
    const float u = to_float(x[in + d + i]);
    out[o + i] = from_float<T>(g / (1.f + expf(-g)) * u);
  }
}

}  // namespace revolta
