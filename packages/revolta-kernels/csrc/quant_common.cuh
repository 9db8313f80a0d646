// Shared pieces of the weight-only int4/int8 group-quantized GEMMs (quant_gemv.cuh, quant_gemm.cuh).
// Self-contained for NVRTC (CUDA headers only); sm_70 features only: fp16 math, no cp.async/ldmatrix/bf16.
//
// Weight layout (see revolta_kernels/reference/quant.py; the engine repacks AWQ and GPTQ into it at load):
// qweight int32 [K / PACK, N] packed along K (field j of word [r, n] is row r * PACK + j, in order), scales
// fp16 [K / G, N], qzeros int32 [K / G, N / PACK] packed along N; W[k, n] = (q - (z + zero_offset)) * s.
// Row-major packed rows make one warp's 32 x 16-byte loads one contiguous 512-byte segment (128 columns of
// one packed row), so no further interleaving is needed for coalescing.
//
// Dequantization (the "magic number" trick): a field q (< 256) OR-ed into the mantissa of 1024.0h (0x6400)
// is exactly 1024 + q, so one AND/OR (a single LOP3) turns two fields 16 bits apart into a half2. For int4,
// fields (i, i + 4) of a word sit 16 bits apart: the pairs (0, 4) and (2, 6) come out as 1024 + q, the pairs
// (1, 5) and (3, 7) - masked in place at bits 4..7 - as 1024 + 16 q, which one HFMA2 by 1/16 brings back.
// Subtracting 1024 + z (exact) and multiplying by the scale rounds once, giving the same fp16 weight a dense
// fp16 checkpoint would hold. The activations are permuted to match: pair i of a packed row holds x[i] and
// x[i + PACK / 2].
#pragma once

#include <cuda_fp16.h>
#if defined(__CUDACC_RTC__)
typedef unsigned int uint32_t;  // NVRTC has no C library headers
#else
#include <stdint.h>
#endif

#include "weight_load.cuh"

namespace revolta {

// The q/k/v projection's rotary + KV-cache epilogue (quant_gemv_rope.cuh; the split-K-free kernel's ROPE
// variant, M <= 2). Output columns are [H q heads | Hkv k heads | Hkv v heads] of head_dim each; the rotated
// queries go to q_out [M, H, head_dim], the rotated keys and the values into the fp16 paged caches [blocks,
// Hkv, block_size, head_dim] at slots[m] (-1: padding, nothing written). positions [M] index cos_sin
// [max_position, rot_dim] (float32: the cos halves, then the sin halves); neox: pairs (i, i + rot_dim / 2),
// else (2i, 2i + 1); channels past rot_dim are not rotated. positions, slots and cos_sin are step inputs
// (written before the step's kernels), so they are read before the PDL wait.
struct GemvRope {
  __half* q_out;
  __half* k_cache;
  __half* v_cache;
  const long long* positions;
  const long long* slots;
  const float* cos_sin;
  int num_heads, num_kv_heads, head_dim, rot_dim, neox, block_size;
};

struct QuantGemmParams {
  const __half* x;          // [M, K]
  const uint32_t* qweight;  // [K / PACK, N]
  const __half* scales;     // [K / G, N]
  const uint32_t* qzeros;   // [K / G, N / PACK]
  __half* out;              // [M, N]
  float* partial;           // skinny split-K: [splits, M, N] fp32 partial sums (splits > 1)
  int* counters;            // skinny split-K: one arrival counter per 128-column tile, zero between launches
  int M, N, K, group_size, zero_offset, rows_per_split;
  // Skinny kernel only (the GEMM ignores them; 0 there): elements between rows of x (K, or 2K with act),
  // act = 1: x rows hold [gate (K), up (K)] and the kernel multiplies by silu(gate) * up (rounded to fp16,
  // as revolta::silu_and_mul), and packed rows per block prefetched to L2 before the PDL wait.
  int x_stride, act, prefetch_rows;
  // act = 2 (fused residual add + RMSNorm; skinny kernel only): a = rms_norm(h) with h = x + residual (or x
  // when residual is null), rounded to fp16 as revolta::fused_add_rms_norm; h_out[M, K] receives h (written
  // by block (0, 0) alone, a tensor no block reads). norm_weight [K]; zero_centered: weight (1 + w).
  const __half* residual;
  const __half* norm_weight;
  __half* h_out;
  float eps;
  int zero_centered;
  // Skinny kernels: kGemvFlag* bits (quant_gemv.cuh; launch tuning, 0 = the original schedule).
  int flags;
  GemvRope rope;  // quant_gemv_whole_k_kernel<MT, 16, true> only (zero elsewhere)
  // Skinny kernels only (null elsewhere): act-order GPTQ's input order [K] - element k of the activation the
  // weights see is channel x_order[k] of x (act 1: of gate and up; act 2: of h and the norm weight), gathered
  // while staging (gemv_stage_warp); h_out stays in channel order.
  const int* x_order;
};

__device__ __forceinline__ __half2 u2h(uint32_t v) { return *reinterpret_cast<__half2*>(&v); }
__device__ __forceinline__ uint32_t h2u(__half2 v) { return *reinterpret_cast<uint32_t*>(&v); }

// Prefetch the 128-byte line at `p` into L2 (no register result; sm_70 has it).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// silu(g) * u in fp32, rounded to fp16 (the same rounding as revolta::silu_and_mul), on 2 halves at once.
__device__ __forceinline__ uint32_t silu_mul_h2(uint32_t g, uint32_t u) {
  const float2 gf = __half22float2(u2h(g)), uf = __half22float2(u2h(u));
  return h2u(__floats2half2_rn(gf.x / (1.f + expf(-gf.x)) * uf.x, gf.y / (1.f + expf(-gf.y)) * uf.y));
}


// Per-column constants of one group: (1024 + z) in both halves, -(64 + z) (int4's x16 pairs) and the scale.
struct ColQuant {
  __half2 zb, zb16, s;
};

// `z` is the column's zero point plus the zero offset (<= 256).
__device__ __forceinline__ ColQuant col_quant(uint32_t z, __half s) {
  ColQuant c;
  c.zb = u2h((z | (z << 16)) | 0x64006400u);
  c.zb16 = __hsub2(u2h(0x63806380u), c.zb);  // 960 - (1024 + z)
  c.s = __half2half2(s);
  return c;
}

// (a & b) | c in one LOP3 (the compiler splits it in two when b and c are both immediates).
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// One packed word -> PACK / 2 half2 weights (q - z) * s (SCALE) or just q - z (exact); pair i holds fields
// (i, i + PACK / 2).
template <int BITS, bool SCALE = true>
__device__ __forceinline__ void dequant_word(uint32_t w, const ColQuant& c, __half2 (&out)[16 / BITS]) {
  const uint32_t magic = 0x64006400u;
  if constexpr (BITS == 4) {
    const __half2 sixteenth = u2h(0x2C002C00u);  // 1/16
    const uint32_t hi = w >> 8;
    out[0] = __hsub2(u2h(and_or(w, 0x000F000Fu, magic)), c.zb);
    out[1] = __hfma2(u2h(and_or(w, 0x00F000F0u, magic)), sixteenth, c.zb16);
    out[2] = __hsub2(u2h(and_or(hi, 0x000F000Fu, magic)), c.zb);
    out[3] = __hfma2(u2h(and_or(hi, 0x00F000F0u, magic)), sixteenth, c.zb16);
  } else {
    out[0] = __hsub2(u2h(and_or(w, 0x00FF00FFu, magic)), c.zb);
    out[1] = __hsub2(u2h(and_or(w >> 8, 0x00FF00FFu, magic)), c.zb);
  }
  if constexpr (SCALE) {
#pragma unroll
    for (int i = 0; i < 16 / BITS; ++i) out[i] = __hmul2(out[i], c.s);
  }
}

// One packed row of x: PACK halves (int4: 16 bytes, int8: 8).
template <int PAIRS> struct XRowOf { using type = uint4; };
template <> struct XRowOf<2> { using type = uint2; };

// The dequantizer's pair permutation of one packed row of x (int4: pair i = elements i, i + 4; int8: i, i + 2),
// so the half2 pairs of x line up with dequant_word's.
template <int PAIRS>
__device__ __forceinline__ typename XRowOf<PAIRS>::type gemv_perm(const typename XRowOf<PAIRS>::type raw) {
  typename XRowOf<PAIRS>::type v;
  if constexpr (PAIRS == 4) {
    v.x = __byte_perm(raw.x, raw.z, 0x5410);
    v.y = __byte_perm(raw.x, raw.z, 0x7632);
    v.z = __byte_perm(raw.y, raw.w, 0x5410);
    v.w = __byte_perm(raw.y, raw.w, 0x7632);
  } else {
    v.x = __byte_perm(raw.x, raw.y, 0x5410);
    v.y = __byte_perm(raw.x, raw.y, 0x7632);
  }
  return v;
}
// SiLU-and-mul of one packed row of gate / up halves (rounded as revolta::silu_and_mul), pair-permuted as gemv_perm.
template <int PAIRS>
__device__ __forceinline__ typename XRowOf<PAIRS>::type silu_mul_perm(typename XRowOf<PAIRS>::type g,
                                                                      const typename XRowOf<PAIRS>::type u) {
  uint32_t* gp = reinterpret_cast<uint32_t*>(&g);
  const uint32_t* upw = reinterpret_cast<const uint32_t*>(&u);
#pragma unroll
  for (int i = 0; i < PAIRS; ++i) gp[i] = silu_mul_h2(gp[i], upw[i]);
  return gemv_perm<PAIRS>(g);
}

// Zero point of column n (field n % PACK of `word`) plus the offset.
template <int BITS>
__device__ __forceinline__ uint32_t zero_field(uint32_t word, int n, int offset) {
  return ((word >> (BITS * (n % (32 / BITS)))) & ((1u << BITS) - 1u)) + static_cast<uint32_t>(offset);
}

// The constants of one group for a column quad n .. n + 3: its 4 scales (sv) and the zero word (zw) holding them.
template <int BITS>
__device__ __forceinline__ void quad_quants(uint2 sv, uint32_t zw, int n, int offset, ColQuant (&cq)[4]) {
  const __half* sh = reinterpret_cast<const __half*>(&sv);
#pragma unroll
  for (int c = 0; c < 4; ++c) cq[c] = col_quant(zero_field<BITS>(zw, n + c, offset), sh[c]);
}

// One packed row of a column quad (w: 4 columns' words) against the permuted input row xr: each column's products
// summed in half2, then added to its fp32 accumulator (the skinny kernels' accuracy contract).
template <int BITS>
__device__ __forceinline__ void quad_dot(const uint4& w, const typename XRowOf<16 / BITS>::type xr,
                                         const ColQuant (&cq)[4], float (&acc)[4]) {
  constexpr int PAIRS = 16 / BITS;
  const uint32_t* xp = reinterpret_cast<const uint32_t*>(&xr);
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    __half2 d[PAIRS];
    dequant_word<BITS, true>(words[c], cq[c], d);
    __half2 h = __hmul2(d[0], u2h(xp[0]));
#pragma unroll
    for (int i = 1; i < PAIRS; ++i) h = __hfma2(d[i], u2h(xp[i]), h);
    const float2 f = __half22float2(h);
    acc[c] += f.x + f.y;
  }
}

}  // namespace revolta
