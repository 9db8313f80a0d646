// Act-order GPTQ (QuantGemmParams::x_order) in the skinny kernels, the parts the kernels call themselves: the
// channel indices read before the PDL wait, and the block's shared-memory copies of the activation that the
// kGatherShared staging (quant_gemv_stage.cuh's gemv_stage_gather) reads its channels from.
#pragma once

#include "quant_gemv_stage.cuh"

namespace revolta {

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

// quant_gemv_gather_kernel (split-K, quant_gemv.cuh) gathers from shared-memory copies (kGemvFlagGatherShared, set by
// the launcher) where they fit beside its staged rows within this many bytes of dynamic shared memory (static + dynamic
// must stay under 48 KB without an opt-in); otherwise from L2, a 32-byte sector per 2-byte element.
constexpr int kGemvGatherSharedCap = 44 * 1024;
constexpr int kGemvFlagGatherShared = 32;

// Bytes of gemv_gather_copy's copies: x (act 2: h) of MT rows and the norm weight, K channels each.
__host__ __device__ constexpr int gemv_gather_copy_bytes(int mt, int k) { return (mt + 1) * k * 2; }

// Where the copies start in a split-K block's dynamic shared memory: after its staged rows / reduction scratch.
__host__ __device__ constexpr int gemv_gather_copy_offset(int bits, int mt, int warps, int rows_per_split) {
  return (gemv_smem_bytes(bits, mt, warps, rows_per_split) + 15) / 16 * 16;
}

// The most a launch of quant_gemv_gather_kernel<BITS, MT, *> asks for (tools/check_sm70_quant.py).
template <int BITS, int MT>
__device__ const int quant_gemv_gather_max_smem =
    quant_gemv_max_smem<BITS, MT, 8> > kGemvGatherSharedCap ? quant_gemv_max_smem<BITS, MT, 8> : kGemvGatherSharedCap;

// After the PDL wait, the whole block (one barrier): x[m, :] (act 2: h = x + residual, rounded as the contiguous
// staging rounds it, and stored to h_out where `writer`) for m < MT (zeros past M) and, for act 2, the norm weight,
// in channel order at `hs` (gemv_gather_copy_bytes). Returns p pointing at them (residual none, h written), for
// gemv_stage_warp's kGatherShared staging. Not for act 1 (gate and up would need 2K channels per row).
template <int MT>
__device__ __forceinline__ QuantGemmParams gemv_gather_copy(const QuantGemmParams& p, uint4* hs, bool writer) {
  const int chunks = p.K / 8;  // 16-byte chunks of a row
  uint4* ws = hs + MT * chunks;
  for (int idx = threadIdx.x; idx < MT * chunks; idx += blockDim.x) {
    const int m = idx / chunks, c = idx - m * chunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (m < p.M) {
      v = p.act == 2 ? gemv_h8(p, m, c)
                     : __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(m) * p.x_stride) + c);
      if (p.act == 2 && writer) reinterpret_cast<uint4*>(p.h_out + static_cast<size_t>(m) * p.K)[c] = v;
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

}  // namespace revolta
