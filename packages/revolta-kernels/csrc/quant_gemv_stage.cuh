// The skinny int4/int8 GEMV kernels' tile constants, schedule flags and activation staging: the residual add +
// RMSNorm of act = 2, the dequantizer's pair permutation and the deferred-scale division (quant_gemv.cuh).
#pragma once

#include "quant_common.cuh"

namespace revolta {

constexpr int kGemvTile = 128;  // columns per block: 32 lanes x 4
constexpr int kGemvFlush = 2;   // packed rows per fp16 dot product before it is added in fp32

template <int PAIRS> struct XRowOf { using type = uint4; };
template <> struct XRowOf<2> { using type = uint2; };

constexpr int kGemvXSmemCap = 40 * 1024;  // staged activations per block (the plan caps rows per split);
                                          // static + dynamic shared memory must stay under 48 KB
constexpr int kGemvCounterBytes = 64 * 1024;  // workspace head: one arrival counter per column tile
constexpr float kGemvDeferScale = 128.f;      // DEFER: x is staged divided by this power of two

// Dynamic shared memory of one block: the staged activations, reused for the cross-warp reduction.
__host__ __device__ constexpr int gemv_smem_bytes(int bits, int mt, int warps, int rows_per_split) {
  const int x_bytes = mt * rows_per_split * (32 / bits) * 2;
  const int red_bytes = warps * mt * kGemvTile * 4;
  return x_bytes > red_bytes ? x_bytes : red_bytes;
}

// The most any launch of quant_gemv_kernel<BITS, MT, WARPS, *> asks for (tools/check_sm70_quant.py).
template <int BITS, int MT, int WARPS>
__device__ const int quant_gemv_max_smem = gemv_smem_bytes(BITS, MT, WARPS, kGemvXSmemCap / (MT * (32 / BITS) * 2));

// QuantGemmParams::flags of the split-K-free kernel (quant_gemv_full.cuh; tune gemv_flags; quant_gemv_kernel
// ignores them):
// kGemvFlagEarlyTrigger: pdl_trigger() at the very start instead of right after pdl_wait(), so the next kernel
// is launched (and may stream its weights into free slots) while this one still waits;
// kGemvFlagOnePass: x staged in one pass over L2 - act = 2 loads x, the residual and the norm weight together,
// keeps the permuted h in shared memory and the norm weight in registers over the sum-of-squares barrier, then
// normalizes in place (one L2 round trip instead of two); each warp stages its own rows only (warp-local,
// __syncwarp instead of a block barrier for act 0);
// kGemvFlagFull16: the split-K-free kernel in its 16-column shape (quant_gemv_full.cuh); kGemvFlagFull16Plain:
// the same for act 0 only (with act 2 every block repeats the whole-K norm pass, so narrower blocks double it).
constexpr int kGemvFlagEarlyTrigger = 1;
constexpr int kGemvFlagOnePass = 2;
constexpr int kGemvFlagFull16 = 4;       // the split-K-free kernel with 16-column blocks (quant_gemv_full.cuh)
constexpr int kGemvFlagFull16Plain = 8;  // the same, only for calls without the fused norm (act != 2)

// act = 2: 8 elements of h = x + residual from element 8 c of row m (fp32 add rounded to fp16, as
// revolta::fused_add_rms_norm); x alone without a residual.
__device__ __forceinline__ uint32_t add_round_h2(uint32_t a, uint32_t b) {
  const float2 af = __half22float2(u2h(a)), bf = __half22float2(u2h(b));
  return h2u(__floats2half2_rn(af.x + bf.x, af.y + bf.y));
}

__device__ __forceinline__ uint4 gemv_h8(const QuantGemmParams& p, int m, int c) {
  uint4 v = __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(m) * p.x_stride) + c);
  if (p.residual != nullptr) {
    const uint4 r = __ldg(reinterpret_cast<const uint4*>(p.residual + static_cast<size_t>(m) * p.K) + c);
    v.x = add_round_h2(v.x, r.x);
    v.y = add_round_h2(v.y, r.y);
    v.z = add_round_h2(v.z, r.z);
    v.w = add_round_h2(v.w, r.w);
  }
  return v;
}

// act = 2, after the PDL wait: every block sums h^2 over the whole K of each row (h from L2; block (0, 0)
// also writes h to h_out), then inv[m] = 1 / sqrt(mean + eps) for the staging. `scratch` holds WARPS x MT
// floats (the dynamic shared memory, not yet in use).
template <int MT, int WARPS>
__device__ __forceinline__ void gemv_norm_rows(const QuantGemmParams& p, float* inv, float* scratch) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const bool writer = blockIdx.x == 0 && blockIdx.y == 0;
  const int chunks = p.K / 8;
  float ss[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    ss[m] = 0.f;
    if (m >= p.M) continue;
    for (int c = tid; c < chunks; c += WARPS * 32) {
      const uint4 h = gemv_h8(p, m, c);
      if (writer) reinterpret_cast<uint4*>(p.h_out + static_cast<size_t>(m) * p.K)[c] = h;
      const uint32_t hw[4] = {h.x, h.y, h.z, h.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __half22float2(u2h(hw[i]));
        ss[m] = fmaf(f.x, f.x, ss[m]);
        ss[m] = fmaf(f.y, f.y, ss[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    float v = ss[m];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) scratch[warp * MT + m] = v;
  }
  __syncthreads();
  if (tid < MT) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) t += scratch[w * MT + tid];
    inv[tid] = rsqrtf(t / static_cast<float>(p.K) + p.eps);
  }
  __syncthreads();
}

// x pair permutation of one int4 packed row (pair i = elements i, i + 4) and the deferred-scale division.
__device__ __forceinline__ uint4 gemv_perm8(const uint4 raw) {
  uint4 v;
  v.x = __byte_perm(raw.x, raw.z, 0x5410);
  v.y = __byte_perm(raw.x, raw.z, 0x7632);
  v.z = __byte_perm(raw.y, raw.w, 0x5410);
  v.w = __byte_perm(raw.y, raw.w, 0x7632);
  return v;
}
__device__ __forceinline__ uint4 gemv_defer8(uint4 v) {
  uint32_t* vp = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) vp[i] = h2u(__hmul2(u2h(vp[i]), __float2half2_rn(1.f / kGemvDeferScale)));
  return v;
}

// kGemvFlagOnePass staging of int4 x (one packed row = 8 halves = one uint4): this thread covers the local rows
// first, first + stride, ... below `end` (at most CH of them), of every row m < MT (xs[m * ld + row]; global
// packed row r0 + row). act 0: x permuted (and divided by 128 with DEFER). act 2 (the whole K must be covered by
// the block's threads together): x, residual and norm weight loaded in one go, h = x + residual rounded to fp16
// (written to h_out by `writer`), sum h^2, the permuted h stored, one block barrier for the row sums
// (`scratch`: WARPS x MT floats, not aliasing xs), then norm(h) * w rounded as gemv_norm_rows + the staging
// loop round it, in place. Without act 2 no barrier: the caller syncs what it needs (warp or block).
template <int MT, int WARPS, int CH, bool DEFER>
__device__ __forceinline__ void gemv_stage_onepass(const QuantGemmParams& p, uint4* xs, int ld, int r0, int first,
                                                   int stride, int end, bool writer, float* scratch) {
  const bool norm = p.act == 2;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float ss[MT];
  uint4 wn[CH];
#pragma unroll
  for (int m = 0; m < MT; ++m) ss[m] = 0.f;
#pragma unroll
  for (int j = 0; j < CH; ++j) {
    const int row = first + j * stride;
    wn[j] = make_uint4(0, 0, 0, 0);
    if (row >= end) continue;
    if (norm) wn[j] = gemv_perm8(__ldg(reinterpret_cast<const uint4*>(p.norm_weight) + r0 + row));
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      uint4 v = make_uint4(0, 0, 0, 0);
      if (m < p.M) {
        uint4 raw = __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(m) * p.x_stride) + r0 + row);
        if (norm) {
          if (p.residual != nullptr) {
            const uint4 r = __ldg(reinterpret_cast<const uint4*>(p.residual + static_cast<size_t>(m) * p.K) + r0 + row);
            raw.x = add_round_h2(raw.x, r.x);
            raw.y = add_round_h2(raw.y, r.y);
            raw.z = add_round_h2(raw.z, r.z);
            raw.w = add_round_h2(raw.w, r.w);
          }
          if (writer) reinterpret_cast<uint4*>(p.h_out + static_cast<size_t>(m) * p.K)[r0 + row] = raw;
          const uint32_t hw[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 f = __half22float2(u2h(hw[i]));
            ss[m] = fmaf(f.x, f.x, ss[m]);
            ss[m] = fmaf(f.y, f.y, ss[m]);
          }
          v = gemv_perm8(raw);
        } else {
          v = gemv_perm8(raw);
          if constexpr (DEFER) v = gemv_defer8(v);
        }
      }
      xs[m * ld + row] = v;
    }
  }
  if (!norm) return;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    float v = ss[m];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) scratch[warp * MT + m] = v;
  }
  __syncthreads();
  float inv[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) t += scratch[w * MT + m];
    inv[m] = rsqrtf(t / static_cast<float>(p.K) + p.eps);
  }
  const float wz = p.zero_centered ? 1.f : 0.f;
#pragma unroll
  for (int j = 0; j < CH; ++j) {
    const int row = first + j * stride;
    if (row >= end) continue;
    const uint32_t wv[4] = {wn[j].x, wn[j].y, wn[j].z, wn[j].w};
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m >= p.M) continue;
      uint4 v = xs[m * ld + row];
      uint32_t* vp = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 h = __half22float2(u2h(vp[i]));
        const float2 w = __half22float2(u2h(wv[i]));
        vp[i] = h2u(__floats2half2_rn(h.x * inv[m] * (w.x + wz), h.y * inv[m] * (w.y + wz)));
      }
      if constexpr (DEFER) v = gemv_defer8(v);
      xs[m * ld + row] = v;
    }
  }
}

}  // namespace revolta
