// Pieces shared by the paged-attention kernels (decode.cuh, prefill.cuh): launch parameters, paging
// arithmetic and dequantisation of cache chunks into fp16 shared memory (the split merge of the decode
// kernels is in decode_merge.cuh).
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
#include "pdl.cuh"

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
  float* part_o;               // [num_splits, T, H, D] (decode with num_splits > 1)
  float* part_ml;              // [num_splits, T, H, 2]: max (log2 domain), sum
  int num_tokens, num_heads, num_kv_heads, block_size, max_blocks;
  int num_splits;              // decode: context splits per (sequence, KV head, row tile); see split_len
  float scale_log2;            // softmax scale * log2(e)
  int block_shift;             // log2(block_size); block_size must be a power of two
  int* counters;               // decode with num_splits > 1: one arrival counter per (sequence, KV head,
                               // row tile), zero before the launch; the kernel leaves them zero again
  int split_tokens;            // decode: > 0 = fixed chunks of that many keys (a multiple of 64) per split;
                               // 0 = each row tile's context cut evenly into num_splits parts (split_len)
};

// The unrotated projections of the decode step's tokens (strided views, 16-byte aligned rows) and the rotary
// inputs, for paged_decode_vec_kernel's ROPE variant (decode_vec.cuh). cos_sin: float32
// [max_position, rot_dim] (cos halves, then sin halves).
struct DecodeRope {
  const __half* q;  // [T, H, D] view
  const __half* k;  // [T, Hkv, D] view
  const __half* v;
  long long q_tok_stride, q_head_stride, k_tok_stride, k_head_stride, v_tok_stride, v_head_stride;
  const long long* positions;  // [T]
  const float* cos_sin;
  const long long* slots;  // [T] cache slot of each token (-1: padding, not written)
  int rot_dim;  // even, <= D; a multiple of 16 (neox) or 8 (gpt-j)
  int neox;
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

// Decode split plan. With p.split_tokens == 0 the keys a row tile sees, kend_all of them (its sequence's
// ACTUAL context, read on the device, so a CUDA graph captured for a wide block table still balances), are
// cut into p.num_splits parts of whole ALIGN-key units: split s owns [s * len, min(kend_all, (s + 1) * len)).
// Parts past the end are empty (short contexts use fewer splits); their blocks exit at once. With
// p.split_tokens > 0, len = split_tokens (fixed chunks: grids of several waves, where the long first chunks
// are scheduled before the short tails that fill the last wave).
template <int ALIGN>
__device__ __forceinline__ int split_len(int kend_all, int num_splits) {
  const int per = (kend_all + num_splits - 1) / num_splits;
  return max(ALIGN, (per + ALIGN - 1) / ALIGN * ALIGN);
}

}  // namespace revolta
