// Integer dot products for the skinny int4 / int8 GEMVs (quant_gemv.cuh and quant_gemv_whole_k.cuh, XQ = true): the
// staged activations of each step are quantized to int8 (one symmetric scale per step of U packed rows, which lies
// inside one weight group), and the weights are multiplied with them by dp4a (sm_61 and newer, so Volta too): 8
// nibbles in 4 instructions (two LOP3, two dp4a) instead of the 12 of the fp16 path (four LOP3, four HSUB2 / HFMA2 to
// dequantize, four HFMA2), 4 bytes in one. The zero point leaves the inner loop: sum (q - z) x = sum q x - z sum x,
// with sum x kept per step.
// The price is activation rounding to 8 bits (as llama.cpp's and vLLM's GGUF matrix-vector kernels do), so the
// result is no longer the fp16 path's to the last bit: test_quant_xq_gpu.py bounds the difference.
#pragma once

#include "common.cuh"
#include "quant_common.cuh"
#include "quant_gemv_common.cuh"

namespace revolta {

// Unsigned bytes of a times signed bytes of b, summed into c.
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The warp's staged rows (li = 0 .. count - 1 at row_of(li)) rewritten in place as int8, one row per lane and pass.
// A step's U rows sit on U neighbouring lanes of one pass, so its max and its sum take log2(U) shuffles; each lane
// rewrites only the row it read.
// int4 rows (uint4: 8 halves in the dequantizer's pairs (f0, f4), (f1, f5), (f2, f6), (f3, f7)): bytes 0-3 = x of
// fields (0, 2, 4, 6), the byte order of w & 0x0F0F0F0F; bytes 4-7 = fields (1, 3, 5, 7), that of w & 0xF0F0F0F0;
// bytes 8-15 = the step's scale (float) and the sum of its int8 values (int), the same in each of its rows.
// int8 rows (uint2: 4 halves in the pairs (f0, f2), (f1, f3)): bytes 0-3 = x of fields 0-3, the weight word's byte
// order; bytes 4-7 = the step's scale in its even rows and the sum in its odd ones (gemv_xq_meta reads rows 0, 1).
template <int U, typename XRow, typename RowOf>
__device__ __forceinline__ void gemv_quantize_rows(XRow* rows, int count, int lane, RowOf row_of) {
  static_assert(32 % U == 0 && U >= 2, "a step's rows must sit in one pass");
  constexpr int H = sizeof(XRow) / 2;  // halves per row: 8 (int4) or 4 (int8)
  for (int base = 0; base < count; base += 32) {  // the same trip count on every lane: the shuffles need them all
    const int li = base + lane;
    const bool on = li < count;
    XRow* slot = rows + (on ? row_of(li) : 0);
    XRow raw{};
    if (on) raw = *slot;
    const uint32_t* h = reinterpret_cast<const uint32_t*>(&raw);
    float f[H];
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < H / 2; ++i) {
      const float2 v = __half22float2(u2h(h[i]));
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
      amax = fmaxf(amax, fmaxf(fabsf(v.x), fabsf(v.y)));
    }
#pragma unroll
    for (int off = U / 2; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float inv = amax > 0.f ? __fdividef(127.f, amax) : 0.f;
    uint32_t q[H];
    int sum = 0;
#pragma unroll
    for (int i = 0; i < H; ++i) {
      const int v = __float2int_rn(f[i] * inv);
      sum += v;
      q[i] = static_cast<uint32_t>(v) & 0xffu;
    }
#pragma unroll
    for (int off = U / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const uint32_t scale = __float_as_uint(amax * (1.f / 127.f));
    if constexpr (H == 8) {  // halves 0..7 hold fields 0, 4, 1, 5, 2, 6, 3, 7
      const uint32_t lo = q[0] | (q[4] << 8) | (q[1] << 16) | (q[5] << 24);
      const uint32_t hi = q[2] | (q[6] << 8) | (q[3] << 16) | (q[7] << 24);
      if (on) *reinterpret_cast<uint4*>(slot) = make_uint4(lo, hi, scale, static_cast<uint32_t>(sum));
    } else {  // halves 0..3 hold fields 0, 2, 1, 3
      const uint32_t word = q[0] | (q[2] << 8) | (q[1] << 16) | (q[3] << 24);
      if (on) *reinterpret_cast<uint2*>(slot) = make_uint2(word, li & 1 ? static_cast<uint32_t>(sum) : scale);
    }
  }
}

// A step's scale and sum of its int8 activations, from its first rows (gemv_quantize_rows' layout).
struct XQMeta {
  float scale;
  int sum;
};
__device__ __forceinline__ XQMeta gemv_xq_meta(const uint4* step_rows) {
  return {__uint_as_float(step_rows[0].z), static_cast<int>(step_rows[0].w)};
}
__device__ __forceinline__ XQMeta gemv_xq_meta(const uint2* step_rows) {
  return {__uint_as_float(step_rows[0].y), static_cast<int>(step_rows[1].y)};
}

// A lane's 4 columns in one group: the integer zero points (with the offset) and the weight scales times the
// deferred-scale factor the staging divided x by.
template <int BITS>
__device__ __forceinline__ void xq_columns(uint32_t zeros_word, uint2 scales, int n0, int zero_offset, int (&zi)[4],
                                           float (&sf)[4]) {
  const __half* sh = reinterpret_cast<const __half*>(&scales);
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    zi[c] = static_cast<int>(zero_field<BITS>(zeros_word, n0 + c, zero_offset));
    sf[c] = __half2float(sh[c]) * kGemvDeferScale;
  }
}

// One packed row (a word per column) times the rows' int8 activations xq[m] (gemv_quantize_rows' bytes 0-7): int4
// low nibbles into lo, high nibbles (as 16 q) into hi; int8 bytes into lo.
template <int BITS, int MT>
__device__ __forceinline__ void xq_dot_row(const uint32_t (&words)[4], const uint2 (&xq)[MT], int (&lo)[MT][4],
                                           int (&hi)[MT][4]) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    if constexpr (BITS == 4) {
      const uint32_t l = words[c] & 0x0F0F0F0Fu, h = words[c] & 0xF0F0F0F0u;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        lo[m][c] = dp4a_us(l, xq[m].x, lo[m][c]);
        hi[m][c] = dp4a_us(h, xq[m].y, hi[m][c]);
      }
    } else {
#pragma unroll
      for (int m = 0; m < MT; ++m) lo[m][c] = dp4a_us(words[c], xq[m].x, lo[m][c]);
    }
  }
}

// acc += s * sx * (q . x_int8 - z * sum_x) for a row's 4 columns: the step's integer sums turned into fp32 once.
template <int BITS>
__device__ __forceinline__ void xq_accumulate(const int (&lo)[4], const int (&hi)[4], const int (&zi)[4],
                                              const float (&sf)[4], XQMeta meta, float (&acc)[4]) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int dot = (BITS == 4 ? lo[c] + (hi[c] >> 4) : lo[c]) - zi[c] * meta.sum;
    acc[c] = fmaf(sf[c] * meta.scale, static_cast<float>(dot), acc[c]);
  }
}

}  // namespace revolta
