// Tensor-core GEMM of stacked quantized experts over rows sorted by expert (a MoE layer's prefill): one launch
// for every expert, each row multiplied by its own expert's weights. out[r] = x[r] @ W[e] for the rows
// offsets[e] .. offsets[e + 1] - 1. The tile body is quant_gemm.cuh's (WMMA -> HMMA on sm_70, dequantization on
// the way into shared memory); this kernel only finds which expert and which of its row tiles a block owns.
//
// Grid (ceil(N / BN), tiles): an expert with c rows owns ceil(c / BM) consecutive row tiles, experts in order.
// The grid's tile count is an upper bound (ceil(R / BM) + E) since the counts live on the device; blocks past
// the last tile return at once. Warp 0 finds the block's tile with a warp scan over the experts' tile counts.
#pragma once

#include "quant_gemm.cuh"

namespace revolta {

struct QuantMoeGemmParams {
  QuantGemmParams g;          // x [R, K] rows sorted by expert, out [R, N]; qweight / scales / qzeros: [E, ...] stacks
  const long long* offsets;   // [E + 1]: expert e's rows are offsets[e] .. offsets[e + 1] - 1 (offsets[0] = 0)
  int E;
};

// The grouped kernel's tile: 64 rows (prefill spreads a few tens of rows over each expert) x 128 columns, 8 warps.
constexpr int kMoeGemmBM = 64, kMoeGemmBN = 128, kMoeGemmBK = 32, kMoeGemmWM = 2, kMoeGemmWN = 4;

template <int BITS>
using MoeGemmCfg = GemmCfg<BITS, kMoeGemmBM, kMoeGemmBN, kMoeGemmBK, kMoeGemmWM, kMoeGemmWN>;

template <int BITS>
__device__ const int quant_moe_gemm_smem_bytes = MoeGemmCfg<BITS>::SMEM;

// Expert e's rows [x, y), clamped to the R rows so that no offsets can take a block outside x and out.
__device__ __forceinline__ longlong2 moe_gemm_rows(const QuantMoeGemmParams& q, int e) {
  const long long R = q.g.M;
  const long long lo = min(max(q.offsets[e], 0LL), R);
  return make_longlong2(lo, min(max(q.offsets[e + 1], lo), R));
}

template <int BITS>
__global__ void __launch_bounds__(kMoeGemmWM * kMoeGemmWN * 32) quant_moe_gemm_kernel(QuantMoeGemmParams q) {
  constexpr int BM = kMoeGemmBM;
  __shared__ int owner[2];  // the block's expert (-1: no tile) and its first row within that expert
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, tile = blockIdx.y;
    int base = 0;  // row tiles of the experts before this chunk of 32
    if (lane == 0) owner[0] = -1;
    for (int e0 = 0; e0 < q.E; e0 += 32) {
      const int e = e0 + lane;
      const long long rows = e < q.E ? moe_gemm_rows(q, e).y - moe_gemm_rows(q, e).x : 0;
      const int tiles = static_cast<int>((rows + BM - 1) / BM);
      int incl = tiles;  // inclusive scan of the chunk's tile counts
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += v;
      }
      const int first = base + incl - tiles;
      if (tile >= first && tile < base + incl) {  // one lane of one chunk at most
        owner[0] = e;
        owner[1] = (tile - first) * BM;
      }
      base += __shfl_sync(0xffffffffu, incl, 31);
      if (base > tile) break;  // uniform across the warp
    }
  }
  __syncthreads();
  const int e = owner[0];
  if (e < 0) return;
  QuantGemmParams p = q.g;
  const longlong2 rows = moe_gemm_rows(q, e);
  p.x += rows.x * p.K;
  p.out += rows.x * p.N;
  p.M = static_cast<int>(rows.y - rows.x);
  constexpr int PACK = 32 / BITS;
  const int groups = p.K / p.group_size;  // expert e's tensors as the other MoE kernels find them
  p.qweight += static_cast<size_t>(e) * (p.K / PACK) * p.N;
  p.scales += static_cast<size_t>(e) * groups * p.N;
  p.qzeros += static_cast<size_t>(e) * groups * (p.N / PACK);
  quant_gemm_tile<BITS, BM, kMoeGemmBN, kMoeGemmBK, kMoeGemmWM, kMoeGemmWN>(p, owner[1], blockIdx.x * kMoeGemmBN);
}

}  // namespace revolta
