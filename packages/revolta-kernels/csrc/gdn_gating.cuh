// Small elementwise pieces around the gated delta rule, fused so a decode step launches one kernel for each:
// the gating (decay g and beta from the input projection) and the gated RMSNorm of the output.
// Self-contained for NVRTC; fp32 math, fp16/bf16/fp32 storage, with the reference's roundings to storage.
#pragma once

#include "common.cuh"

namespace revolta {

// The log decay g = -exp(A_log) * softplus(a + dt_bias), softplus as torch: x > 20 ? x : log1p(exp(x)).
__device__ __forceinline__ float gdn_log_decay(float a, float dt_bias, float a_log) {
  const float x = a + dt_bias;
  const float sp = x > 20.f ? x : log1pf(expf(x));
  return -expf(a_log) * sp;
}

// beta = sigmoid(b), in fp32 (the kernels round it to the storage type).
__device__ __forceinline__ float gdn_beta(float b) { return 1.f / (1.f + expf(-b)); }

// g[t, h] = -exp(A_log[h]) * softplus(a[t, h] + dt_bias[h]) (float32), beta[t, h] = sigmoid(b[t, h]) (storage
// type). a and b have row strides; outputs are contiguous [T, H]. softplus as torch: x > 20 ? x : log1p(exp(x)).
template <typename T>
__global__ void gdn_gating_kernel(float* __restrict__ g, T* __restrict__ beta, const T* __restrict__ a,
                                  const T* __restrict__ b, const T* __restrict__ a_log, const T* __restrict__ dt_bias,
                                  int num_tokens, int heads, long long a_stride, long long b_stride) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= num_tokens * heads) return;
  const int t = i / heads, h = i % heads;
  g[i] = gdn_log_decay(to_float(a[t * a_stride + h]), to_float(dt_bias[h]), to_float(a_log[h]));
  beta[i] = from_float<T>(gdn_beta(to_float(b[t * b_stride + h])));
}

// out = weight * rmsnorm(x) * silu(gate) over the last dimension D, rows (i0, i1) of [N0, N1, D] views with
// strides; out contiguous. One warp per row; rows up to 256 long are loaded once with every load in flight
// together. Roundings as the reference: normed and weight * normed are rounded to the storage type.
template <typename T>
__device__ __forceinline__ float gated_norm_value(float xv, float gv, float wv, float inv) {
  const float normed = to_float(from_float<T>(xv * inv));
  const float wn = to_float(from_float<T>(wv * normed));
  return wn * (gv / (1.f + expf(-gv)));
}

template <typename T>
__global__ void rms_norm_gated_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ gate,
                                      const T* __restrict__ weight, int n0, int n1, int D, long long x_s0,
                                      long long x_s1, long long g_s0, long long g_s1, float eps) {
  constexpr int kPerLane = 8;
  const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= n0 * n1) return;
  const int i0 = row / n1, i1 = row % n1;
  const T* xr = x + i0 * x_s0 + i1 * x_s1;
  const T* gr = gate + i0 * g_s0 + i1 * g_s1;
  T* o = out + static_cast<size_t>(row) * D;
  if (D <= 32 * kPerLane) {
    float xv[kPerLane], gv[kPerLane], wv[kPerLane];
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int i = lane + 32 * j;
      const bool in = i < D;
      xv[j] = in ? to_float(xr[i]) : 0.f;
      gv[j] = in ? to_float(gr[i]) : 0.f;
      wv[j] = in ? to_float(weight[i]) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) ss += xv[j] * xv[j];
    const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(D) + eps);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int i = lane + 32 * j;
      if (i < D) o[i] = from_float<T>(gated_norm_value<T>(xv[j], gv[j], wv[j], inv));
    }
    return;
  }
  float ss = 0.f;
  for (int i = lane; i < D; i += 32) {
    const float v = to_float(xr[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(D) + eps);
  for (int i = lane; i < D; i += 32) {
    o[i] = from_float<T>(gated_norm_value<T>(to_float(xr[i]), to_float(gr[i]), to_float(weight[i]), inv));
  }
}

}  // namespace revolta
