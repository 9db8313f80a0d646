// Split-K-free skinny int4 GEMV for short K (decode, M <= 2; K <= 4096, K % 1024 == 0, group 128): the
// "whole slice in registers" variant of quant_gemv_kernel for the 4096-class projections (q/k/v, o).
//
// Block = 8 warps over 32 columns (quant_gemv_whole_k_cols): a lane owns 4 columns of one row group (8 lanes
// per packed row, 4 row groups per warp), warp w owns packed rows [w K/64, (w + 1) K/64), so every block
// covers the whole K of its columns and no split-K partials, fences or arrival counters exist. Before the
// PDL wait each lane issues the loads of ALL its weights (16 x 16 bytes at K = 4096) and of its 4 groups'
// scales and zeros: with <= 128 registers two blocks share an SM, so this grid's blocks become resident
// beside the previous kernel's (one per SM for N <= 4224 on 132 SMs) and their whole weight stream is in
// flight during the previous kernel's tail. After the wait: stage x (all of K, permuted; act = 2 computes
// the residual add + RMSNorm there, as quant_gemv_kernel does), the dot products (deferred scale, as
// quant_gemv_kernel's DEFER), a shuffle over the 4 row groups, one shared-memory sum over the 8 warps, and
// the fp16 store. Grid = N / 32 blocks.
#pragma once

#include "quant_gemv_kernels.cuh"
#include "quant_gemv_rope.cuh"

namespace revolta {

constexpr int quant_gemv_whole_k_cols = 32;  // columns per block
constexpr int kGemvFullWarps = 8;
constexpr int kGemvFullLoads = 16;  // packed rows per lane: K = 4096 at most (8 warps x 4 row groups x 16)

__host__ __device__ constexpr int gemv_full_smem_bytes(int mt, int k) {
  const int x_bytes = mt * k * 2;
  const int red_bytes = kGemvFullWarps * mt * quant_gemv_whole_k_cols * 4;
  return x_bytes > red_bytes ? x_bytes : red_bytes;
}
template <int MT>
__device__ const int quant_gemv_whole_k_max_smem = gemv_full_smem_bytes(MT, 4096);

// The act-order instantiation's shared memory: the staged rows, then x (or h) of every row in channel order and
// the norm weight (gemv_full_gather_copy).
__host__ __device__ constexpr int gemv_full_gather_smem_bytes(int mt, int k) {
  const int copies = 2 * mt * k * 2 + k * 2;
  const int base = gemv_full_smem_bytes(mt, k);
  return copies > base ? copies : base;
}
template <int MT>
__device__ const int quant_gemv_whole_k_gather_max_smem = gemv_full_gather_smem_bytes(MT, 4096);

// After the PDL wait, the act-order kernel's copies (whole block, one barrier): x[m, :] (act 2: h = x + residual,
// rounded as the contiguous staging rounds it, and stored to h_out by block 0) for m < MT (zeros past M) and the
// norm weight, in channel order behind the staged rows. Returns p pointing at them (residual none, h written),
// for gemv_stage_warp's kGatherShared staging.
template <int MT>
__device__ __forceinline__ QuantGemmParams gemv_full_gather_copy(const QuantGemmParams& p, unsigned char* smem) {
  const int chunks = p.K / 8;  // 16-byte chunks of a row
  uint4* hs = reinterpret_cast<uint4*>(smem) + MT * chunks;  // after the staged rows (MT x K halves)
  uint4* ws = hs + MT * chunks;
  for (int idx = threadIdx.x; idx < MT * chunks; idx += blockDim.x) {
    const int m = idx / chunks, c = idx - m * chunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (m < p.M) {
      v = p.act == 2 ? gemv_h8(p, m, c)
                     : __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(m) * p.x_stride) + c);
      if (p.act == 2 && blockIdx.x == 0) reinterpret_cast<uint4*>(p.h_out + static_cast<size_t>(m) * p.K)[c] = v;
    }
    hs[idx] = v;
  }
  if (p.act == 2) {
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) ws[c] = __ldg(reinterpret_cast<const uint4*>(p.norm_weight) + c);
  }
  __syncthreads();
  QuantGemmParams q = p;
  q.x = reinterpret_cast<const __half*>(hs);
  q.x_stride = p.K;
  q.residual = nullptr;
  q.norm_weight = reinterpret_cast<const __half*>(ws);
  return q;
}

// COLS = 32 (the original shape, <= 128 registers: 2 blocks per SM) or 16 (kGemvFlagFull16: lanes of 4 columns,
// 8 row groups per warp, 8 loads per lane, <= 80 registers: 3 blocks per SM). The narrower block halves each
// lane's serial dequantize-and-dot chain after the wait (H200 probe: the 32-column block's compute phase took
// ~1.85 us at 2 warps per scheduler, latency-bound, the same with 1 or 2 blocks per SM) and spreads N = 6144
// over 384 blocks instead of 192 on 132 SMs.
// ROPE (16 columns only): the q/k/v projection's rotary + KV-cache epilogue (quant_gemv_rope.cuh) instead of
// the plain store; the block's columns follow gemv_rope_col.
// GATHER: the act-order instantiation (p.x_order set; gemv_stage_gather). A separate kernel because the gather's
// registers, beside every weight of the lane held since before the PDL wait, cost the plain kernel spills.
// XQ (16 columns, no gather): int8 activations and dp4a dot products (quant_gemv_dp4a.cuh), one activation scale per
// weight group; the lanes of row group 0 apply the group's zero-point term for all eight.
template <int MT, int COLS = quant_gemv_whole_k_cols, bool ROPE = false, bool GATHER = false, bool XQ = false>
__global__ void __launch_bounds__(kGemvFullWarps * 32, COLS == 16 ? 3 : 2) quant_gemv_whole_k_kernel(QuantGemmParams p) {
  static_assert(COLS == 16 || COLS == 32, "16 or 32 columns per block");
  static_assert(!XQ || (COLS == 16 && !GATHER), "int8 activations: 16 columns, no gather");
  static_assert(!ROPE || COLS == 16, "the rotary epilogue pairs the channels of 16-column blocks");
  constexpr int BITS = 4, PACK = 8, LG = COLS / 4, RG = 32 / LG, WARPS = kGemvFullWarps;
  constexpr int L = kGemvFullLoads * 4 / RG;  // loads per lane at K = 4096 (16 or 8)
  constexpr int GR = 16;  // packed rows per group of 128
  constexpr int NG = L * RG / GR;  // groups a lane's rows touch (4)
  extern __shared__ __align__(16) unsigned char gemv_smem[];
  __shared__ float norm_inv[MT];
  if (p.flags & kGemvFlagEarlyTrigger) pdl_trigger();

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int rg = lane / LG, cl = lane % LG;
  const int n0 = ROPE ? gemv_rope_col(p.rope, blockIdx.x, cl * 4) : blockIdx.x * COLS + cl * 4;
  const bool col_ok = n0 < p.N;
  const int rows = p.K / PACK, rpw = rows / WARPS;  // rpw: a multiple of GR (K % 1024 == 0)
  const int nl = rpw / RG;                           // loads per lane (<= L)
  const int row0 = warp * rpw + rg;                  // row of load i: row0 + i * RG

  // Act-order: first the channel indices of the warp's rows into shared memory (read-only, so before the wait;
  // before the weight loads, whose registers it would otherwise add to).
  auto row_of = [&](int li) { return warp * rpw + li; };
  if constexpr (GATHER) gemv_order_prefetch<4>(p, reinterpret_cast<uint4*>(gemv_smem), 0, rpw, row_of);

  // Before the PDL wait: every weight, scale and zero this lane needs (read-only data).
  uint4 w[L];
  uint2 sc[NG];
  uint32_t zc[NG];
#pragma unroll
  for (int i = 0; i < L; ++i) {
    w[i] = make_uint4(0, 0, 0, 0);
    if (col_ok && i < nl)
      w[i] = load_once(reinterpret_cast<const uint4*>(p.qweight + static_cast<size_t>(row0 + i * RG) * p.N + n0));
  }
#pragma unroll
  for (int j = 0; j < NG; ++j) {
    sc[j] = make_uint2(0, 0);
    zc[j] = 0;
    if (col_ok && j * (GR / RG) < nl) {
      const int g = (warp * rpw) / GR + j;
      sc[j] = load_once(reinterpret_cast<const uint2*>(p.scales + static_cast<size_t>(g) * p.N + n0));
      zc[j] = load_once(p.qzeros + static_cast<size_t>(g) * (p.N / PACK) + n0 / PACK);
    }
  }
  __shared__ GemvRopeShared<ROPE> rope_sh;
  if constexpr (ROPE) {
    if (warp == 0) gemv_rope_prefetch(p, rope_sh.st, lane);
  }
  pdl_wait();  // x comes from the previous kernel; out may still be in its use
  pdl_trigger();
  uint4* xs = reinterpret_cast<uint4*>(gemv_smem);
  const bool onepass = GATHER || (p.flags & kGemvFlagOnePass) != 0;  // act-order always stages per warp
  const bool deferred_norm = onepass && p.act == 2;  // 1 / rms applied to the sums (gemv_stage_warp)
  WarpNorm<MT> wn;
  if constexpr (GATHER) {
    // Act-order (always one pass): x (act 2: h = x + residual, written to h_out by block 0) and the norm weight
    // copied once per block into shared memory in channel order, then each warp gathers its rows from there.
    gemv_stage_warp<4, MT, 1, true, kGatherShared>(gemv_full_gather_copy<MT>(p, gemv_smem), xs, rows, 0, rpw, row_of,
                                                   false, wn);
    __syncwarp();
  } else if (onepass) {
    // Each warp stages its own rows [warp rpw, (warp + 1) rpw) (<= 64: 2 per lane), no block barrier.
    gemv_stage_warp<4, MT, MT == 1 ? 2 : 1, true, kGatherNone>(p, xs, rows, 0, rpw, row_of, blockIdx.x == 0, wn);
    __syncwarp();
  } else if (p.act == 2) {
    gemv_norm_rows<MT, WARPS>(p, norm_inv, reinterpret_cast<float*>(gemv_smem));
  }

  // Stage x[m, :] (rows past M are zero) as permuted half2 pairs divided by the deferred-scale factor.
  for (int idx = onepass ? MT * rows : tid; idx < MT * rows; idx += WARPS * 32) {
    const int m = idx / rows, r = idx - m * rows;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (m < p.M) {
      uint4 raw = __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(m) * p.x_stride) + r);
      if (p.act == 2) {
        uint32_t* rp = reinterpret_cast<uint32_t*>(&raw);
        uint4 res = make_uint4(0, 0, 0, 0);
        if (p.residual != nullptr) res = __ldg(reinterpret_cast<const uint4*>(p.residual + static_cast<size_t>(m) * p.K) + r);
        const uint4 wr = __ldg(reinterpret_cast<const uint4*>(p.norm_weight) + r);
        const uint32_t* resp = reinterpret_cast<const uint32_t*>(&res);
        const uint32_t* wp = reinterpret_cast<const uint32_t*>(&wr);
        const float inv = norm_inv[m], wz = p.zero_centered ? 1.f : 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 h = __half22float2(u2h(p.residual != nullptr ? add_round_h2(rp[i], resp[i]) : rp[i]));
          const float2 wf = __half22float2(u2h(wp[i]));
          rp[i] = h2u(__floats2half2_rn(h.x * inv * (wf.x + wz), h.y * inv * (wf.y + wz)));
        }
      }
      v = gemv_perm<4>(raw);
      gemv_scale_h2<4>(v, __float2half2_rn(1.f / kGemvDeferScale));
    }
    xs[idx] = v;
  }
  if (!onepass) __syncthreads();
  if constexpr (XQ) {  // each warp's own rows, one scale per group of GR rows
#pragma unroll
    for (int m = 0; m < MT; ++m) gemv_quantize_rows<GR>(xs + m * rows, rpw, lane, row_of);
    __syncwarp();
  }

  float acc[MT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[m][c] = 0.f;
#pragma unroll
  for (int j = 0; j < NG && XQ; ++j) {
    if (j * (GR / RG) >= nl) break;  // K < 4096: this warp's rows end here (uniform)
    int zi[4];
    float sf[4];
    xq_columns<BITS>(zc[j], sc[j], n0, p.zero_offset, zi, sf);
    int lo_acc[MT][4] = {}, hi_acc[MT][4] = {};
#pragma unroll
    for (int ii = 0; ii < GR / RG; ++ii) {
      const int i = j * (GR / RG) + ii;
      uint2 xq[MT];
#pragma unroll
      for (int m = 0; m < MT; ++m) xq[m] = *reinterpret_cast<const uint2*>(&xs[m * rows + row0 + i * RG]);
      const uint32_t words[4] = {w[i].x, w[i].y, w[i].z, w[i].w};
      xq_dot_row<BITS, MT>(words, xq, lo_acc, hi_acc);
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      XQMeta meta = gemv_xq_meta(&xs[m * rows + warp * rpw + j * GR]);
      if (rg != 0) meta.sum = 0;  // row group 0's lanes apply the zero-point term for the whole group
      xq_accumulate<BITS>(lo_acc[m], hi_acc[m], zi, sf, meta, acc[m]);
    }
  }
#pragma unroll
  for (int j = 0; j < NG && !XQ; ++j) {
    if (j * (GR / RG) >= nl) break;  // K < 4096: this warp's rows end here (uniform)
    const __half* sh = reinterpret_cast<const __half*>(&sc[j]);
    ColQuant cq[4];
    float sf[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      cq[c] = col_quant(zero_field<BITS>(zc[j], n0 + c, p.zero_offset), sh[c]);
      sf[c] = __half2float(sh[c]) * kGemvDeferScale;
    }
#pragma unroll
    for (int ii = 0; ii < GR / RG; ii += kGemvFlush) {
      __half2 hacc[MT][4];
#pragma unroll
      for (int f = 0; f < kGemvFlush; ++f) {
        const int i = j * (GR / RG) + ii + f;
        uint4 xr[MT];
#pragma unroll
        for (int m = 0; m < MT; ++m) xr[m] = xs[m * rows + row0 + i * RG];
        const uint32_t words[4] = {w[i].x, w[i].y, w[i].z, w[i].w};
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          __half2 d[4];
          dequant_word<BITS, false>(words[c], cq[c], d);
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            const uint32_t* xp = reinterpret_cast<const uint32_t*>(&xr[m]);
            __half2 h = f == 0 ? __hmul2(d[0], u2h(xp[0])) : __hfma2(d[0], u2h(xp[0]), hacc[m][c]);
#pragma unroll
            for (int q = 1; q < 4; ++q) h = __hfma2(d[q], u2h(xp[q]), h);
            hacc[m][c] = h;
          }
        }
      }
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float2 f2 = __half22float2(hacc[m][c]);
          acc[m][c] = fmaf(sf[c], f2.x + f2.y, acc[m][c]);
        }
    }
  }

  // The RG row groups of a warp (lanes cl, cl + LG, ...), then the 8 warps through shared memory.
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
#pragma unroll
      for (int o = LG; o < 32; o <<= 1) acc[m][c] += __shfl_xor_sync(0xffffffffu, acc[m][c], o);
    }
  __shared__ float warp_ss[WARPS][MT];
  if (deferred_norm) gemv_warp_norm_out(wn.ss, wn, acc, warp_ss);
  __syncthreads();  // the staged x is dead
  float* red = reinterpret_cast<float*>(gemv_smem);  // [WARPS][MT][COLS]
  if (rg == 0) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
      *reinterpret_cast<float4*>(red + (warp * MT + m) * COLS + cl * 4) =
          make_float4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]);
  }
  __syncthreads();
  if constexpr (ROPE) {
    if (warp == 0) {
      const int m = lane / COLS, col = lane % COLS;
      float v = 0.f;
      if (m < MT) {
#pragma unroll
        for (int ww = 0; ww < WARPS; ++ww) v += red[(ww * MT + m) * COLS + col];
        if (deferred_norm) v *= gemv_row_inv<WARPS>(p, warp_ss, m);
      }
      gemv_rope_store(p, rope_sh.st, v, lane);
    }
  } else if (tid < MT * COLS) {
    const int m = tid / COLS, col = tid % COLS;
    const int n = blockIdx.x * COLS + col;
    if (m < p.M && n < p.N) {
      float v = 0.f;
#pragma unroll
      for (int ww = 0; ww < WARPS; ++ww) v += red[(ww * MT + m) * COLS + col];
      if (deferred_norm) v *= gemv_row_inv<WARPS>(p, warp_ss, m);
      p.out[static_cast<size_t>(m) * p.N + n] = __float2half_rn(v);
    }
  }
}

}  // namespace revolta
