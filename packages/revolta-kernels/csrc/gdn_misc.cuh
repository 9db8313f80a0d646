// Small elementwise pieces around the gated delta rule, fused so a decode step launches one kernel for each:
// the gating (decay g and beta from the input projection) and the gated RMSNorm of the output.
// Self-contained for NVRTC; fp32 math, fp16/bf16/fp32 storage, with the reference's roundings to storage.
#pragma once

#include "common.cuh"

namespace revolta {

// g[t, h] = -exp(A_log[h]) * softplus(a[t, h] + dt_bias[h]) (float32), beta[t, h] = sigmoid(b[t, h]) (storage
// type). a and b have row strides; outputs are contiguous [T, H]. softplus as torch: x > 20 ? x : log1p(exp(x)).
template <typename T>
__global__ void gdn_gating_kernel(float* __restrict__ g, T* __restrict__ beta, const T* __restrict__ a,
                                  const T* __restrict__ b, const T* __restrict__ a_log, const T* __restrict__ dt_bias,
                                  int num_tokens, int heads, long long a_stride, long long b_stride) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= num_tokens * heads) return;
  const int t = i / heads, h = i % heads;
  const float x = to_float(a[t * a_stride + h]) + to_float(dt_bias[h]);
  const float sp = x > 20.f ? x : log1pf(expf(x));
  g[i] = -expf(to_float(a_log[h])) * sp;
  beta[i] = from_float<T>(1.f / (1.f + expf(-to_float(b[t * b_stride + h]))));
}

// out = weight * rmsnorm(x) * silu(gate) over the last dimension D, rows (i0, i1) of [N0, N1, D] views with
// strides; out contiguous. One warp per row. Roundings as the reference: normed and weight * normed are rounded
// to the storage type before the gate.
template <typename T>
__global__ void rms_norm_gated_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ gate,
                                      const T* __restrict__ weight, int n0, int n1, int D, long long x_s0,
                                      long long x_s1, long long g_s0, long long g_s1, float eps) {
  const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= n0 * n1) return;
  const int i0 = row / n1, i1 = row % n1;
  const T* xr = x + i0 * x_s0 + i1 * x_s1;
  const T* gr = gate + i0 * g_s0 + i1 * g_s1;
  T* o = out + static_cast<size_t>(row) * D;
  float ss = 0.f;
  for (int i = lane; i < D; i += 32) {
    const float v = to_float(xr[i]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(D) + eps);
  for (int i = lane; i < D; i += 32) {
    const float normed = to_float(from_float<T>(to_float(xr[i]) * inv));
    const float wn = to_float(from_float<T>(to_float(weight[i]) * normed));
    const float gv = to_float(gr[i]);
    o[i] = from_float<T>(wn * (gv / (1.f + expf(-gv))));
  }
}

}  // namespace revolta
