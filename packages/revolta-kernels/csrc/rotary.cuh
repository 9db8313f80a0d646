// Rotary position embedding, neox (halves) and gpt-j (interleaved pairs) styles, partial rotary
// (channels past rot_dim are copied). Grid = (token, chunk of its q+k channels); inputs may be strided views (e.g. slices of a
// fused qkv tensor), outputs are contiguous [T, heads, head_dim].
#pragma once

#include "common.cuh"
#include "cache.cuh"
#include "rope_math.cuh"

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
  return rotate_pair(x1, x2, c, s, first);
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

// rotary_and_cache: rotary on q (written to q_out, contiguous [T, H, D]) and k, and the KV-cache write of
// the rotated k and of v (reshape_and_cache_kernel's conversions and padding slot -1), in one launch.
// One warp per (token, job): jobs are the H query heads, then the Hkv key heads, then the Hkv value heads;
// WPB warps per block, grid = (token, job chunk). The rotated k is not returned: attention reads it from
// the cache. Same per-element arithmetic as rotary_kernel + reshape_and_cache_kernel.
// With q_norm_w / k_norm_w (Qwen3's and Qwen3.5's per-head q/k RMSNorm, head_dim <= kRopeNormMaxDim), each
// q/k head is first normalised as rms_norm_kernel does (rounded to T) into the warp's shared-memory row,
// and rotary reads it from there.
constexpr int kRopeCacheWarps = 8;
constexpr int kRopeNormMaxDim = 256;

template <typename T>
__device__ __forceinline__ const T* head_rms_norm(const T* src, T* row, const T* w, float eps, bool zero_centered,
                                                  int head_dim, int lane) {
  float ss = 0.f;
  for (int d = lane; d < head_dim; d += 32) {
    const float x = to_float(src[d]);
    ss += x * x;
  }
  const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(head_dim) + eps);
  for (int d = lane; d < head_dim; d += 32)
    row[d] = from_float<T>(to_float(src[d]) * inv * (to_float(w[d]) + (zero_centered ? 1.f : 0.f)));
  __syncwarp();
  return row;
}

template <typename T, typename CS, int KIND>
__global__ void __launch_bounds__(32 * kRopeCacheWarps)
rotary_and_cache_kernel(T* __restrict__ q_out, const T* __restrict__ q, const T* __restrict__ k,
                        const T* __restrict__ v, const int64_t* __restrict__ positions,
                        const CS* __restrict__ cos_sin, void* __restrict__ key_cache,
                        void* __restrict__ value_cache, float* __restrict__ k_scales,
                        float* __restrict__ v_scales, const int64_t* __restrict__ slots,
                        int num_heads, int num_kv_heads, int head_dim, int rot_dim, int block_size,
                        long long q_tok_stride, long long q_head_stride, long long k_tok_stride,
                        long long k_head_stride, long long v_tok_stride, long long v_head_stride,
                        bool neox, const T* __restrict__ q_norm_w, const T* __restrict__ k_norm_w, float eps,
                        bool zero_centered) {
  // The positions, the slots and the cos/sin rows are step inputs (written by copies or non-PDL kernels earlier
  // on the stream, like the block tables decode_vec.cuh reads early), so their loads, and the cos/sin row's
  // dependent one, are issued before the PDL wait; q, k and v come from the previous kernel and are read after it.
  const int t = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const int job = blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int64_t slot = slots[t];
  const CS* cs = cos_sin + positions[t] * rot_dim;
  if (lane * 128 < rot_dim * static_cast<int>(sizeof(CS)))
    asm volatile("prefetch.global.L1 [%0];" ::"l"(reinterpret_cast<const char*>(cs) + lane * 128));
  // The trigger comes first so the attention kernel after this one launches now and issues its own early cache
  // loads while the projection before us still runs (H200, AWQ decode 485.8 / 486.1 against 484.1 / 484.8 tok/s
  // with the trigger after the wait: within noise, but in both rounds).
  pdl_trigger();
  pdl_wait();  // launched with PDL (pdl.cuh): q, k, v come from the previous kernel, the cache is read by others
  __shared__ T normed[kRopeCacheWarps][kRopeNormMaxDim];
  if (job >= num_heads + 2 * num_kv_heads) return;
  T* row = normed[threadIdx.x >> 5];
  if (job < num_heads) {
    const T* src = q + t * q_tok_stride + job * q_head_stride;
    if (q_norm_w != nullptr) src = head_rms_norm(src, row, q_norm_w, eps, zero_centered, head_dim, lane);
    T* dst = q_out + (static_cast<size_t>(t) * num_heads + job) * head_dim;
    for (int d = lane; d < head_dim; d += 32) dst[d] = from_float<T>(rotate_one(src, cs, d, rot_dim, neox));
    return;
  }
  if (slot < 0) return;
  const bool is_v = job >= num_heads + num_kv_heads;
  const int h = job - num_heads - (is_v ? num_kv_heads : 0);
  const T* src = is_v ? v + t * v_tok_stride + h * v_head_stride : k + t * k_tok_stride + h * k_head_stride;
  if (!is_v && k_norm_w != nullptr) src = head_rms_norm(src, row, k_norm_w, eps, zero_centered, head_dim, lane);
  const int64_t blk = slot / block_size, off = slot % block_size;
  const size_t tok = (static_cast<size_t>(blk) * num_kv_heads + h) * block_size + off;
  const size_t dst = tok * head_dim;
  // The value written for channel d: k rotated (rounded to T first, as the two-kernel path stores it), v as is.
  auto value_of = [&](int d) {
    return is_v ? to_float(src[d]) : to_float(from_float<T>(rotate_one(src, cs, d, rot_dim, neox)));
  };
  if (KIND == CACHE_I8) {
    float amax = 0.f;
    for (int d = lane; d < head_dim; d += 32) amax = fmaxf(amax, fabsf(value_of(d)));
    amax = warp_max(amax);
    const float scale = fmaxf(amax, 1e-8f) / 127.f;
    int8_t* c = static_cast<int8_t*>(is_v ? value_cache : key_cache) + dst;
    for (int d = lane; d < head_dim; d += 32) {
      const float x = rintf(value_of(d) / scale);
      c[d] = static_cast<int8_t>(fminf(fmaxf(x, -127.f), 127.f));
    }
    if (lane == 0) (is_v ? v_scales : k_scales)[tok] = scale;
  } else if (KIND == CACHE_E4M3 || KIND == CACHE_E5M2) {
    uint8_t* c = static_cast<uint8_t*>(is_v ? value_cache : key_cache) + dst;
    for (int d = lane; d < head_dim; d += 32) {
      const float x = value_of(d);
      c[d] = KIND == CACHE_E4M3 ? float_to_e4m3(x) : float_to_e5m2(x);
    }
  } else {
    T* c = static_cast<T*>(is_v ? value_cache : key_cache) + dst;
    for (int d = lane; d < head_dim; d += 32) c[d] = is_v ? src[d] : from_float<T>(rotate_one(src, cs, d, rot_dim, neox));
  }
}

}  // namespace revolta
