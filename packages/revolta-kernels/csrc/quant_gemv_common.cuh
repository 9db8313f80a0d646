// The skinny int4/int8 GEMV kernels' tile constants, schedule flags and activation staging: the residual add +
// RMSNorm of act = 2 and the deferred-scale division (quant_gemv.cuh); the pair permutation is quant_common.cuh's.
#pragma once

#include "common.cuh"
#include "quant_common.cuh"

namespace revolta {

constexpr int kGemvTile = 128;  // columns per block: 32 lanes x 4
constexpr int kGemvFlush = 2;   // packed rows per fp16 dot product before it is added in fp32

constexpr int kGemvXSmemCap = 40 * 1024;  // staged activations per block (the plan caps rows per split);
                                          // static + dynamic shared memory must stay under 48 KB
constexpr int kGemvCounterBytes = 64 * 1024;  // workspace head: one arrival counter per column tile
constexpr int kGemvDeferLog2 = 7;
constexpr float kGemvDeferScale = 1 << kGemvDeferLog2;  // DEFER: x is staged divided by this power of two

// Dynamic shared memory of one block: the staged activations, reused for the cross-warp reduction.
__host__ __device__ constexpr int gemv_smem_bytes(int bits, int mt, int warps, int rows_per_split) {
  const int x_bytes = mt * rows_per_split * (32 / bits) * 2;
  const int red_bytes = warps * mt * kGemvTile * 4;
  return x_bytes > red_bytes ? x_bytes : red_bytes;
}

// The most any launch of quant_gemv_kernel<BITS, MT, WARPS, *> asks for (tools/check_volta.py).
template <int BITS, int MT, int WARPS>
__device__ const int quant_gemv_max_smem = gemv_smem_bytes(BITS, MT, WARPS, kGemvXSmemCap / (MT * (32 / BITS) * 2));

// QuantGemmParams::flags of the split-K-free kernel (quant_gemv_whole_k.cuh; tune gemv_flags; quant_gemv_kernel
// ignores them):
// kGemvFlagEarlyTrigger: pdl_trigger() at the very start instead of right after pdl_wait(), so the next kernel
// is launched (and may stream its weights into free slots) while this one still waits;
// kGemvFlagOnePass: x staged in one pass over L2, each warp its own rows only (gemv_stage_warp: __syncwarp
// instead of a block barrier; act = 2 loads x, the residual and the norm weight together and applies the
// 1 / rms to the finished sums, so no barrier waits for the whole-K sum of squares); without it act 2 sums h^2
// over K first (gemv_norm_rows) and stages the normalized rows in a second pass;
// kGemvFlagFull16: the split-K-free kernel in its 16-column shape (quant_gemv_whole_k.cuh); kGemvFlagFull16Plain:
// the same for act 0 only (with act 2 every block repeats the whole-K norm pass, so narrower blocks double it).
constexpr int kGemvFlagEarlyTrigger = 1;
constexpr int kGemvFlagOnePass = 2;
constexpr int kGemvFlagFull16 = 4;       // the split-K-free kernel with 16-column blocks (quant_gemv_whole_k.cuh)
constexpr int kGemvFlagFull16Plain = 8;  // the same, only for calls without the fused norm (act != 2)
constexpr int kGemvFlagInt8X = 16;       // skinny calls: int8 activations, dp4a (quant_gemv_dp4a.cuh)

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

// act = 2: this thread's sum of h^2 over the chunks tid, tid + NT, ... of each row's whole K (h from L2;
// `writer` also stores h to h_out).
template <int MT, int NT>
__device__ __forceinline__ void gemv_thread_sumsq(const QuantGemmParams& p, bool writer, float (&ss)[MT]) {
  const int chunks = p.K / 8;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    ss[m] = 0.f;
    if (m >= p.M) continue;
    for (int c = threadIdx.x; c < chunks; c += NT) {
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
}

// act = 2, after the PDL wait: every block sums h^2 over the whole K of each row (block (0, 0) also writes h
// to h_out), then inv[m] = 1 / sqrt(mean + eps) for the staging. `scratch` holds WARPS x MT floats (the
// dynamic shared memory, not yet in use).
template <int MT, int WARPS>
__device__ __forceinline__ void gemv_norm_rows(const QuantGemmParams& p, float* inv, float* scratch) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float ss[MT];
  gemv_thread_sumsq<MT, WARPS * 32>(p, blockIdx.x == 0 && blockIdx.y == 0, ss);
#pragma unroll
  for (int m = 0; m < MT; ++m) ss[m] = warp_sum(ss[m]);
#pragma unroll
  for (int m = 0; m < MT; ++m)
    if (lane == 0) scratch[warp * MT + m] = ss[m];
  __syncthreads();
  if (tid < MT) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) t += scratch[w * MT + tid];
    inv[tid] = rsqrtf(t / static_cast<float>(p.K) + p.eps);
  }
  __syncthreads();
}

// act = 2 with the staging of gemv_stage_warp: 1 / rms of row m from the warps' sums of h^2 (fixed order).
template <int WARPS, int MT>
__device__ __forceinline__ float gemv_row_inv(const QuantGemmParams& p, const float (&warp_ss)[WARPS][MT], int m) {
  float t = 0.f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) t += warp_ss[w][m];
  return rsqrtf(t / static_cast<float>(p.K) + p.eps);
}

template <int PAIRS>
__device__ __forceinline__ void gemv_scale_h2(typename XRowOf<PAIRS>::type& v, __half2 f) {
  uint32_t* vp = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
  for (int i = 0; i < PAIRS; ++i) vp[i] = h2u(__hmul2(u2h(vp[i]), f));
}

// 2^e as a float for -126 <= e <= 127 (exact; ldexpf's range handling costs registers in the GEMV kernels).
__device__ __forceinline__ float gemv_pow2(int e) { return __int_as_float((127 + e) << 23); }

// What the warp-local act = 2 staging leaves its caller (the same in every lane): the sum of h^2 over the
// warp's staged rows and the power of two 2^e the staged values carry.
template <int MT>
struct WarpNorm {
  float ss[MT];
  int e[MT];
};

// Act-order (p.x_order): element i of packed row r of the activation is channel x_order[PACK r + i]. Before the
// PDL wait (x_order is read-only) each warp copies the indices of its own rows, as 16-bit values, into the m = 0
// slots of its staged rows (xs[row_of(li)]: PACK indices fill exactly one staged row), so after the wait a row's
// gather costs one L2 round trip, as the contiguous load does, instead of two dependent ones. The same lane stages
// the row later (gemv_stage_gather), so no barrier is needed. Needs K <= 65536.
template <int PAIRS, class RowOf>
__device__ __forceinline__ void gemv_order_prefetch(const QuantGemmParams& p, typename XRowOf<PAIRS>::type* xs, int r0,
                                                    int n, RowOf row_of) {
  using XRow = typename XRowOf<PAIRS>::type;
  for (int li = threadIdx.x & 31; li < n; li += 32) {
    const int local = row_of(li);
    const int4* src = reinterpret_cast<const int4*>(p.x_order + static_cast<size_t>(r0 + local) * 2 * PAIRS);
    XRow packed;
    uint32_t* pp = reinterpret_cast<uint32_t*>(&packed);
#pragma unroll
    for (int q = 0; q < PAIRS / 2; ++q) {
      const int4 v = __ldg(src + q);
      pp[2 * q] = (static_cast<uint32_t>(v.x) & 0xffffu) | (static_cast<uint32_t>(v.y) << 16);
      pp[2 * q + 1] = (static_cast<uint32_t>(v.z) & 0xffffu) | (static_cast<uint32_t>(v.w) << 16);
    }
    xs[local] = packed;
  }
}

// Channel i of a row's indices as gemv_order_prefetch packed them.
template <class XRow>
__device__ __forceinline__ int gemv_order_at(const XRow& packed, int i) {
  return (reinterpret_cast<const uint32_t*>(&packed)[i / 2] >> (16 * (i % 2))) & 0xffff;
}

// Where the act-order staging reads the channels: global memory (through L2), or copies the block made in shared
// memory first (quant_gemv_whole_k_kernel: each of its blocks gathers the whole K, which from L2 costs a 32-byte
// sector per 2-byte element).
enum GatherFrom { kGatherNone = 0, kGatherGlobal = 1, kGatherShared = 2 };

// The elements src[c_0], src[c_1], ... of one packed row (one 2-byte load each).
template <int FROM, class XRow>
__device__ __forceinline__ XRow gemv_gather(const __half* src, const XRow& packed) {
  XRow v;
  __half* h = reinterpret_cast<__half*>(&v);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(XRow) / 2); ++i) {
    const __half* e = src + gemv_order_at(packed, i);
    h[i] = FROM == kGatherShared ? *e : __ldg(e);
  }
  return v;
}

// gemv_stage_warp's staging for act-order: the contiguous path's arithmetic on rows gathered from their channels
// (indices from gemv_order_prefetch), h scattered back to channel order by the writer. Rows m run from the last to
// 0, whose slots hold the indices until their own row is staged. Kept apart from the contiguous loop (not one
// loop with two kinds of loads): sharing it cost the default kernels registers and spills (sm_90 ptxas -v).
// Adds the rows' sums of h^2 to ss.
template <int PAIRS, int MT, bool DEFER, int FROM, class RowOf>
__device__ __forceinline__ void gemv_stage_gather(const QuantGemmParams& p, typename XRowOf<PAIRS>::type* xs, int ld,
                                                  int n, RowOf row_of, bool writer, float (&ss)[MT]) {
  using XRow = typename XRowOf<PAIRS>::type;
  const bool norm = p.act == 2;
  const float wz = p.zero_centered ? 1.f : 0.f;
#pragma unroll
  for (int m = MT - 1; m >= 0; --m) {
    const bool live = m < p.M;
    const __half* xm = p.x + static_cast<size_t>(m) * p.x_stride;
#pragma unroll 1
    for (int li = threadIdx.x & 31; li < n; li += 32) {
      const int local = row_of(li);
      const XRow order = xs[local];
      XRow a{}, b{}, g{};
      if (live) {
        a = gemv_gather<FROM>(xm, order);
        if (p.act == 1) {
          b = gemv_gather<FROM>(xm + p.K, order);
        } else if (norm) {
          g = gemv_gather<FROM>(p.norm_weight, order);
          if (p.residual != nullptr) b = gemv_gather<FROM>(p.residual + static_cast<size_t>(m) * p.K, order);
        }
      }
      uint32_t* ap = reinterpret_cast<uint32_t*>(&a);
      const uint32_t* bp = reinterpret_cast<const uint32_t*>(&b);
      const uint32_t* gp = reinterpret_cast<const uint32_t*>(&g);
      if (live && p.act == 1) {
#pragma unroll
        for (int i = 0; i < PAIRS; ++i) ap[i] = silu_mul_h2(ap[i], bp[i]);
      } else if (live && norm) {
        if (p.residual != nullptr) {
#pragma unroll
          for (int i = 0; i < PAIRS; ++i) ap[i] = add_round_h2(ap[i], bp[i]);
        }
        if (writer && p.h_out != nullptr) {
          const __half* hv = reinterpret_cast<const __half*>(&a);
#pragma unroll
          for (int i = 0; i < 2 * PAIRS; ++i) p.h_out[static_cast<size_t>(m) * p.K + gemv_order_at(order, i)] = hv[i];
        }
#pragma unroll
        for (int i = 0; i < PAIRS; ++i) {
          const float2 h = __half22float2(u2h(ap[i]));
          const float2 w = __half22float2(u2h(gp[i]));
          ss[m] = fmaf(h.x, h.x, ss[m]);
          ss[m] = fmaf(h.y, h.y, ss[m]);
          ap[i] = h2u(__floats2half2_rn(h.x * (w.x + wz), h.y * (w.y + wz)));
        }
      }
      XRow v = gemv_perm<PAIRS>(a);
      if (DEFER && !norm) gemv_scale_h2<PAIRS>(v, __float2half2_rn(1.f / kGemvDeferScale));
      xs[m * ld + local] = v;
    }
  }
}

// Warp-local staging of x: local row li < n of this warp is packed row r0 + row_of(li), stored at
// xs[m * ld + row_of(li)] for every m < MT (zeros past M), permuted for the dequantizer. A lane takes rows
// lane, lane + 32, ... in batches of CB whose loads are all issued before any is used; no block barrier, so
// each warp starts its dot products once its own rows are staged (the caller's __syncwarp).
// act 0: x (DEFER: divided by kGemvDeferScale). act 1: silu(gate) * up as revolta::silu_and_mul rounds it.
// act 2: h = x + residual (rounded as revolta::fused_add_rms_norm; `writer` stores it to h_out) times the norm
// weight (w, or 1 + w), rounded to fp16 - the 1 / rms is not known yet and is applied by the caller to the
// finished dot products, so no barrier waits for the whole-K sum of squares. Once the warp's own sum of h^2
// is reduced, its staged values are scaled in place by 2^e (exact) with 2^e ~ 1 / rms over the warp's rows,
// so a small or large residual stream sits where fp16 is precise, as the normalized activation does (DEFER's
// division is folded into the same power of two); the caller multiplies the warp's sums by 2^-e.
// With p.x_order (act-order) the rows are gathered from their channels (gemv_stage_gather; the caller ran
// gemv_order_prefetch before its PDL wait) - from global memory, or (kGatherShared) from the shared-memory copies
// p points to; kGatherNone compiles that path out.
template <int PAIRS, int MT, int CB, bool DEFER, int GATHER = kGatherGlobal, class RowOf>
__device__ __forceinline__ void gemv_stage_warp(const QuantGemmParams& p, typename XRowOf<PAIRS>::type* xs, int ld,
                                                int r0, int n, RowOf row_of, bool writer, WarpNorm<MT>& wn) {
  using XRow = typename XRowOf<PAIRS>::type;
  const int lane = threadIdx.x & 31;
  const bool norm = p.act == 2;
  const float wz = p.zero_centered ? 1.f : 0.f;
  const __half2 defer = __float2half2_rn(1.f / kGemvDeferScale);
  float ss[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) ss[m] = 0.f;
  if (GATHER != kGatherNone && p.x_order != nullptr) {
    gemv_stage_gather<PAIRS, MT, DEFER, GATHER>(p, xs, ld, n, row_of, writer, ss);
  } else {
    // One row m at a time (its loads and at most 3 x CB live registers per batch, whatever MT is).
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const bool live = m < p.M;
      const __half* xm = p.x + static_cast<size_t>(m) * p.x_stride;
      for (int base = 0; base < n; base += 32 * CB) {
        XRow a[CB], b[CB], g[CB];
#pragma unroll
        for (int j = 0; j < CB; ++j) {
          const int li = base + j * 32 + lane;
          const int row = li < n ? r0 + row_of(li) : 0;
          a[j] = b[j] = g[j] = XRow{};
          if (li >= n || !live) continue;
          a[j] = __ldg(reinterpret_cast<const XRow*>(xm) + row);
          if (p.act == 1) {
            b[j] = __ldg(reinterpret_cast<const XRow*>(xm + p.K) + row);
          } else if (norm) {
            g[j] = __ldg(reinterpret_cast<const XRow*>(p.norm_weight) + row);
            if (p.residual != nullptr)
              b[j] = __ldg(reinterpret_cast<const XRow*>(p.residual + static_cast<size_t>(m) * p.K) + row);
          }
        }
#pragma unroll
        for (int j = 0; j < CB; ++j) {
          const int li = base + j * 32 + lane;
          if (li >= n) continue;
          const int local = row_of(li);
          uint32_t* ap = reinterpret_cast<uint32_t*>(&a[j]);
          const uint32_t* bp = reinterpret_cast<const uint32_t*>(&b[j]);
          const uint32_t* gp = reinterpret_cast<const uint32_t*>(&g[j]);
          if (live && p.act == 1) {
#pragma unroll
            for (int i = 0; i < PAIRS; ++i) ap[i] = silu_mul_h2(ap[i], bp[i]);
          } else if (live && norm) {
            if (p.residual != nullptr) {
#pragma unroll
              for (int i = 0; i < PAIRS; ++i) ap[i] = add_round_h2(ap[i], bp[i]);
            }
            if (writer) reinterpret_cast<XRow*>(p.h_out + static_cast<size_t>(m) * p.K)[r0 + local] = a[j];
#pragma unroll
            for (int i = 0; i < PAIRS; ++i) {
              const float2 h = __half22float2(u2h(ap[i]));
              const float2 w = __half22float2(u2h(gp[i]));
              ss[m] = fmaf(h.x, h.x, ss[m]);
              ss[m] = fmaf(h.y, h.y, ss[m]);
              ap[i] = h2u(__floats2half2_rn(h.x * (w.x + wz), h.y * (w.y + wz)));
            }
          }
          XRow v = gemv_perm<PAIRS>(a[j]);
          if (DEFER && !norm) gemv_scale_h2<PAIRS>(v, defer);
          xs[m * ld + local] = v;
        }
      }
    }
  }
  if (!norm) return;
#pragma unroll
  for (int m = 0; m < MT; ++m) ss[m] = warp_sum(ss[m]);
  __half2 f[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    wn.ss[m] = ss[m];
    // rms = f 2^ex with f in [0.5, 1), read off the float's exponent field (a zero or subnormal rms gives the
    // largest scale, harmless: its values are zero or tiny; a warp without rows, n = 0, gets NaN and so the
    // smallest scale, as harmless: its sums are zero)
    const float rms = sqrtf(ss[m] / static_cast<float>(n * 2 * PAIRS));
    const int ex = ((__float_as_int(rms) >> 23) & 0xff) - 126;
    // 2^(e - 7) (DEFER) or 2^e must stay a normal fp16 power of two: 2^-14 ... 2^15
    constexpr int shift = DEFER ? kGemvDeferLog2 : 0;
    wn.e[m] = min(15 + shift, max(shift - 14, -ex));
    f[m] = __float2half2_rn(gemv_pow2(wn.e[m] - shift));
  }
  for (int li = lane; li < n; li += 32) {
    const int local = row_of(li);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m >= p.M) continue;
      XRow v = xs[m * ld + local];
      gemv_scale_h2<PAIRS>(v, f[m]);
      xs[m * ld + local] = v;
    }
  }
}

// act = 2 after gemv_stage_warp, before the block's cross-warp sum: lane 0 publishes the warp's sums of h^2
// (`ss`, for gemv_row_inv after the barrier) and the warp's sums drop the staging scale 2^e.
template <int WARPS, int MT>
__device__ __forceinline__ void gemv_warp_norm_out(const float (&ss)[MT], const WarpNorm<MT>& wn, float (&acc)[MT][4],
                                                   float (&warp_ss)[WARPS][MT]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if (lane == 0) warp_ss[warp][m] = ss[m];
    const float unscale = gemv_pow2(-wn.e[m]);
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[m][c] *= unscale;
  }
}

}  // namespace revolta
