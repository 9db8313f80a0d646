// reshape_and_cache: write new K/V [T, Hkv, D] into the paged cache [NB, Hkv, bs, D], converting to the
// cache's storage type. int8 quantises per (token, head) with scale = max|x| / 127 (round half to even,
// like torch.round); fp8 is a plain cast with torch's rounding. Slot -1 is padding and skipped.
// One block per token, one warp per (tensor, head).
#pragma once

#include "common.cuh"

namespace revolta {

enum CacheKind { CACHE_SAME = 0, CACHE_I8 = 1, CACHE_E4M3 = 2, CACHE_E5M2 = 3 };

template <typename T, int KIND>
__global__ void reshape_and_cache_kernel(const T* __restrict__ key, const T* __restrict__ value,
                                         void* __restrict__ key_cache, void* __restrict__ value_cache,
                                         float* __restrict__ k_scales, float* __restrict__ v_scales,
                                         const int64_t* __restrict__ slots, int num_kv_heads, int head_dim,
                                         int block_size, long long k_tok_stride, long long k_head_stride,
                                         long long v_tok_stride, long long v_head_stride) {
  pdl_wait();  // launched with PDL (pdl.cuh): inputs come from the previous kernel
  pdl_trigger();
  const int t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0) return;
  const int64_t blk = slot / block_size, off = slot % block_size;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int job = warp; job < 2 * num_kv_heads; job += nwarps) {
    const bool is_v = job >= num_kv_heads;
    const int h = is_v ? job - num_kv_heads : job;
    const T* src = is_v ? value + t * v_tok_stride + h * v_head_stride : key + t * k_tok_stride + h * k_head_stride;
    const size_t tok = (static_cast<size_t>(blk) * num_kv_heads + h) * block_size + off;
    const size_t dst = tok * head_dim;
    if (KIND == CACHE_I8) {
      float amax = 0.f;
      for (int d = lane; d < head_dim; d += 32) amax = fmaxf(amax, fabsf(to_float(src[d])));
      amax = warp_max(amax);
      const float scale = fmaxf(amax, 1e-8f) / 127.f;
      int8_t* c = static_cast<int8_t*>(is_v ? value_cache : key_cache) + dst;
      for (int d = lane; d < head_dim; d += 32) {
        const float q = rintf(to_float(src[d]) / scale);
        c[d] = static_cast<int8_t>(fminf(fmaxf(q, -127.f), 127.f));
      }
      if (lane == 0) (is_v ? v_scales : k_scales)[tok] = scale;
    } else if (KIND == CACHE_E4M3 || KIND == CACHE_E5M2) {
      uint8_t* c = static_cast<uint8_t*>(is_v ? value_cache : key_cache) + dst;
      for (int d = lane; d < head_dim; d += 32) {
        const float v = to_float(src[d]);
        c[d] = KIND == CACHE_E4M3 ? float_to_e4m3(v) : float_to_e5m2(v);
      }
    } else {
      T* c = static_cast<T*>(is_v ? value_cache : key_cache) + dst;
      for (int d = lane; d < head_dim; d += 32) c[d] = src[d];
    }
  }
}

}  // namespace revolta
