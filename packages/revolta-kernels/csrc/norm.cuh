// RMSNorm and fused residual-add + RMSNorm: one block per row, fp32 math, any of fp16/bf16/fp32 storage.
// A row of up to kNormRegs * blockDim.x elements is kept in registers between the sum of squares and the
// scaling, so it is read from memory once (longer rows re-read the rest). SiLU-and-mul is elementwise over a
// (row, column chunk) grid so one decoding row still spreads over many SMs.
#pragma once

#include "common.cuh"

namespace revolta {

constexpr int kNormRegs = 8;

// One row per block: out = rms_norm(h) * (w, or 1 + w when zero_centered) with h = x (ADD = false), or h = x +
// residual rounded to T and written to residual_out (ADD = true, as the reference fused_add_rms_norm rounds it).
template <typename T, bool ADD>
__device__ __forceinline__ void rms_norm_row(T* __restrict__ out, T* __restrict__ residual_out,
                                             const T* __restrict__ x, const T* __restrict__ residual,
                                             const T* __restrict__ w, float eps, int hidden, bool zero_centered,
                                             float* scratch) {
  const size_t base = static_cast<size_t>(blockIdx.x) * hidden;
  auto load_h = [&](int i) {
    if constexpr (ADD) {
      const T s = from_float<T>(to_float(x[base + i]) + to_float(residual[base + i]));
      residual_out[base + i] = s;
      return to_float(s);
    } else {
      return to_float(x[base + i]);
    }
  };
  float cached[kNormRegs];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kNormRegs; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    cached[j] = i < hidden ? load_h(i) : 0.f;
    ss += cached[j] * cached[j];
  }
  for (int i = threadIdx.x + kNormRegs * blockDim.x; i < hidden; i += blockDim.x) {
    const float v = load_h(i);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(hidden) + eps);
#pragma unroll
  for (int j = 0; j < kNormRegs; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i < hidden) {
      const float wv = to_float(w[i]) + (zero_centered ? 1.f : 0.f);
      out[base + i] = from_float<T>(cached[j] * inv * wv);
    }
  }
  const T* h = ADD ? residual_out : x;  // the rest of a long row is read again
  for (int i = threadIdx.x + kNormRegs * blockDim.x; i < hidden; i += blockDim.x) {
    const float wv = to_float(w[i]) + (zero_centered ? 1.f : 0.f);
    out[base + i] = from_float<T>(to_float(h[base + i]) * inv * wv);
  }
}

template <typename T>
__global__ void rms_norm_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
                                float eps, int hidden, bool zero_centered) {
  pdl_wait();  // launched with PDL (pdl.cuh): inputs come from the previous kernel
  pdl_trigger();
  __shared__ float scratch[32];
  rms_norm_row<T, false>(out, nullptr, x, nullptr, w, eps, hidden, zero_centered, scratch);
}

// residual_out = x + residual (rounded to T, as the reference does); out = rms_norm(residual_out).
template <typename T>
__global__ void fused_add_rms_norm_kernel(T* __restrict__ out, T* __restrict__ residual_out,
                                          const T* __restrict__ x, const T* __restrict__ residual,
                                          const T* __restrict__ w, float eps, int hidden, bool zero_centered) {
  pdl_wait();  // launched with PDL (pdl.cuh): inputs come from the previous kernel
  pdl_trigger();
  __shared__ float scratch[32];
  rms_norm_row<T, true>(out, residual_out, x, residual, w, eps, hidden, zero_centered, scratch);
}

// out[r, i] = silu(x[r, i]) * x[r, d + i]; grid = (rows, column chunks of blockDim.x)
template <typename T>
__global__ void silu_and_mul_kernel(T* __restrict__ out, const T* __restrict__ x, int d) {
  pdl_wait();  // launched with PDL (pdl.cuh): inputs come from the previous kernel
  pdl_trigger();
  const size_t in = static_cast<size_t>(blockIdx.x) * 2 * d, o = static_cast<size_t>(blockIdx.x) * d;
  for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < d; i += gridDim.y * blockDim.x) {
    const float g = to_float(x[in + i]);
    const float u = to_float(x[in + d + i]);
    out[o + i] = from_float<T>(g / (1.f + expf(-g)) * u);
  }
}

// out = x * sigmoid(gate) with torch's rounding (sigmoid rounded to T, then the product): Qwen3.5's attention
// output gate. x is contiguous [rows, heads * d]; gate is [rows, heads, d] with strides (gate_row, gate_head, 1)
// (a view into the q projection). Grid = (row, chunk of its heads * d elements).
template <typename T>
__global__ void sigmoid_gate_mul_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ gate,
                                        int heads, int d, long long gate_row, long long gate_head) {
  pdl_wait();  // launched with PDL (pdl.cuh): inputs come from the previous kernels
  pdl_trigger();
  const size_t o = static_cast<size_t>(blockIdx.x) * heads * d;
  const T* g = gate + blockIdx.x * gate_row;
  for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < heads * d; i += gridDim.y * blockDim.x) {
    const float gv = to_float(g[(i / d) * gate_head + i % d]);
    const float s = to_float(from_float<T>(1.f / (1.f + expf(-gv))));
    out[o + i] = from_float<T>(to_float(x[o + i]) * s);
  }
}

}  // namespace revolta
