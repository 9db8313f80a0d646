// Rotary position embedding, neox (halves) and gpt-j (interleaved pairs) styles, partial rotary
// (channels past rot_dim are copied). Grid = (token, chunk of its q+k channels); inputs may be strided views (e.g. slices of a
// fused qkv tensor), outputs are contiguous [T, heads, head_dim].
#pragma once

#include "common.cuh"

namespace revolta {

template <typename T, typename CS>
__device__ __forceinline__ float rotate_one(const T* x, const CS* cs, int d, int rot_dim, bool neox) {
  const int half = rot_dim / 2;
  if (d >= rot_dim) return to_float(x[d]);
  int i, i1, i2;
  bool first;
  if (neox) {
    first = d < half;
    i = first ? d : d - half;
    i1 = i;
    i2 = i + half;
  } else {
    first = (d & 1) == 0;
    i = d >> 1;
    i1 = 2 * i;
    i2 = 2 * i + 1;
  }
  const float c = to_float(cs[i]), s = to_float(cs[half + i]);
  const float x1 = to_float(x[i1]), x2 = to_float(x[i2]);
  return first ? x1 * c - x2 * s : x2 * c + x1 * s;
}

template <typename T, typename CS>
__global__ void rotary_kernel(T* __restrict__ q_out, T* __restrict__ k_out, const T* __restrict__ q,
                              const T* __restrict__ k, const int64_t* __restrict__ positions,
                              const CS* __restrict__ cos_sin, int num_heads, int num_kv_heads, int head_dim,
                              int rot_dim, long long q_tok_stride, long long q_head_stride,
                              long long k_tok_stride, long long k_head_stride, bool neox) {
  pdl_wait();  // launched with PDL (pdl.cuh): inputs come from the previous kernel
  pdl_trigger();
  const int t = blockIdx.x;
  const CS* cs = cos_sin + positions[t] * rot_dim;
  const int nq = num_heads * head_dim, nk = num_kv_heads * head_dim;
  for (int idx = blockIdx.y * blockDim.x + threadIdx.x; idx < nq + nk; idx += gridDim.y * blockDim.x) {
    if (idx < nq) {
      const int h = idx / head_dim, d = idx % head_dim;
      const T* src = q + t * q_tok_stride + h * q_head_stride;
      q_out[static_cast<size_t>(t) * nq + idx] = from_float<T>(rotate_one(src, cs, d, rot_dim, neox));
    } else {
      const int j = idx - nq;
      const int h = j / head_dim, d = j % head_dim;
      const T* src = k + t * k_tok_stride + h * k_head_stride;
      k_out[static_cast<size_t>(t) * nk + j] = from_float<T>(rotate_one(src, cs, d, rot_dim, neox));
    }
  }
}

}  // namespace revolta
