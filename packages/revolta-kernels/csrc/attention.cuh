// Pieces shared by the paged-attention kernels (decode.cuh, prefill.cuh): launch parameters, paging
// arithmetic, dequantisation of cache chunks into fp16 shared memory, and the split-K merge.
//
// Both kernels use tensor cores only through WMMA (fp16 operands, fp32 accumulate): the only matrix
// instruction family sm_70 has, and portable to every later arch. Rows pack (query token, query head of
// the KV head's group), so a K/V tile read from memory serves every query head that uses it.
//
// Cache layout: [num_blocks, num_kv_heads, block_size, head_dim]; int8 has float32 scales
// [num_blocks, num_kv_heads, block_size]; fp8 is storage only.
#pragma once

#include <mma.h>
#include "common.cuh"

namespace revolta {

enum KvKind { KV_F16 = 0, KV_I8 = 1, KV_E4M3 = 2, KV_E5M2 = 3 };

struct AttnParams {
  const __half* q;             // [T, H, D]
  __half* out;                 // [T, H, D] (used when num_splits == 1)
  const void* k_cache;         // [NB, Hkv, bs, D]
  const void* v_cache;
  const float* k_scales;       // [NB, Hkv, bs] (int8 only)
  const float* v_scales;
  const int* block_tables;     // [S, max_blocks]
  const int* context_lens;     // [S]
  const int* query_start_loc;  // [S + 1]
  float* part_o;               // [num_splits, T, H, D] (split mode)
  float* part_ml;              // [num_splits, T, H, 2]: max (log2 domain), sum
  int num_tokens, num_heads, num_kv_heads, block_size, max_blocks;
  int split_tokens, num_splits;
  float scale_log2;            // softmax scale * log2(e)
  int block_shift;             // log2(block_size); block_size must be a power of two
};

__device__ __forceinline__ int kv_block_index(const AttnParams& p, int kp) { return kp >> p.block_shift; }
__device__ __forceinline__ int kv_block_offset(const AttnParams& p, int kp) { return kp & (p.block_size - 1); }

// Cache values are staged in fp16 divided by this power of two (exact); the kernels multiply it back
// into the softmax scale (K) and the output (V). e4m3 lands 8 binades low when its bits are placed in an
// fp16, and undoing that per element would cost a multiply per value.
template <int KIND>
__device__ __forceinline__ constexpr float kv_unit() { return KIND == KV_E4M3 ? 256.f : 1.f; }

// Dequantise four one-byte cache elements (one 32-bit word) into two half2 words with byte permutes:
// lo = elements 0, 1 and hi = elements 2, 3. int8: 0x64uu as fp16 is 1024 + u, so (b ^ 0x80) placed
// under 0x64 minus 1152 is b, exactly (scales are applied by the caller); e5m2: the byte is the top half
// of an fp16; e4m3: the same shifted right by one with the sign kept, i.e. the value / 256 (kv_unit).
template <int KIND>
__device__ __forceinline__ void dequant_word(uint32_t w, uint32_t& lo, uint32_t& hi) {
  if (KIND == KV_I8) {
    const uint32_t u = w ^ 0x80808080u;
    uint32_t a = __byte_perm(u, 0x64646464u, 0x5140), b = __byte_perm(u, 0x64646464u, 0x7362);
    const __half2 bias = __float2half2_rn(1152.f);
    __half2 ha = __hsub2(*reinterpret_cast<__half2*>(&a), bias), hb = __hsub2(*reinterpret_cast<__half2*>(&b), bias);
    lo = *reinterpret_cast<uint32_t*>(&ha);
    hi = *reinterpret_cast<uint32_t*>(&hb);
  } else {
    const uint32_t a = __byte_perm(w, 0u, 0x1404), b = __byte_perm(w, 0u, 0x3424);
    if (KIND == KV_E4M3) {
      lo = ((a >> 1) & 0x3fff3fffu) | (a & 0x80008000u);
      hi = ((b >> 1) & 0x3fff3fffu) | (b & 0x80008000u);
    } else {
      lo = a;
      hi = b;
    }
  }
}

// Dequantise one 16-byte chunk of cache elements into fp16 shared memory (int8 times its scale).
template <int KIND>
__device__ __forceinline__ void store_chunk(__half* dst, uint4 c, float scale) {
  if (KIND == KV_F16) {
    *reinterpret_cast<uint4*>(dst) = c;
  } else {
    const uint32_t w[4] = {c.x, c.y, c.z, c.w};
    uint32_t h[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) dequant_word<KIND>(w[i], h[2 * i], h[2 * i + 1]);
    if (KIND == KV_I8) {
      const __half2 s2 = __float2half2_rn(scale);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        __half2 v = __hmul2(*reinterpret_cast<__half2*>(&h[i]), s2);
        h[i] = *reinterpret_cast<uint32_t*>(&v);
      }
    }
    reinterpret_cast<uint4*>(dst)[0] = make_uint4(h[0], h[1], h[2], h[3]);
    reinterpret_cast<uint4*>(dst)[1] = make_uint4(h[4], h[5], h[6], h[7]);
  }
}

// Merge split partials: out = sum_s w_s o_s / sum_s w_s, w_s = l_s 2^(m_s - max m). One block per
// (token, head), one thread per channel.
template <int D>
__global__ void __launch_bounds__(D)
attn_reduce_kernel(__half* out, const float* part_o, const float* part_ml, int rows, int num_splits) {
  const int row = blockIdx.x, d = threadIdx.x;
  float M = -INFINITY;
  for (int s = 0; s < num_splits; ++s) M = fmaxf(M, part_ml[(static_cast<size_t>(s) * rows + row) * 2]);
  float acc = 0.f, wsum = 0.f;
  for (int s = 0; s < num_splits; ++s) {
    const size_t pr = static_cast<size_t>(s) * rows + row;
    const float m = part_ml[pr * 2], l = part_ml[pr * 2 + 1];
    if (m == -INFINITY || l <= 0.f) continue;
    const float w = l * exp2f(m - M);
    acc += w * part_o[pr * D + d];
    wsum += w;
  }
  out[static_cast<size_t>(row) * D + d] = __float2half_rn(wsum > 0.f ? acc / wsum : 0.f);
}

}  // namespace revolta
