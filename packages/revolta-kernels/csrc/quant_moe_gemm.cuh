// Tensor-core GEMM of stacked quantized experts over rows sorted by expert (a MoE layer's prefill): one launch
// for every expert, each row multiplied by its own expert's weights. out[r] = x[r] @ W[e] for the rows
// offsets[e] .. offsets[e + 1] - 1. The tile body is quant_gemm.cuh's (WMMA -> HMMA on sm_70, dequantization on
// the way into shared memory); this kernel only finds which expert and which of its row tiles a block owns.
//
// Grid (ceil(N / BN), tiles): an expert with c rows owns ceil(c / BM) consecutive row tiles, experts in order.
// The grid's tile count is an upper bound (ceil(R / BM) + E) since the counts live on the device. Warp 0 finds
// the block's tile with a warp scan over the experts' tile counts. The blocks past the last tile (there is at
// least one whenever a row lies outside every expert's rows) write zeros to those rows' outputs, so the caller
// needs no zero fill.
//
// Row maps (GemmRowMap, quant_gemm.cuh), which spare a MoE layer two passes over its rows: the gate/up call gathers
// each sorted row's token from the unsorted x (x_rows = the sort's order, x_row_div = top_k), the down call writes
// each result to its routed (token, slot) row (out_rows = the sort's order), ready for the weighted sum. SILU_OUT: the
// gate/up call writes silu(gate) * up (quant_gemm_tile's SiLU epilogue: each block holds 64 gate columns and their up
// columns), half the bytes and no separate pass. (SiLU-and-mul while staging the down call's rows instead measured
// slower: each of the N / 128 column blocks recomputes it, and the loop is issue-bound.)
#pragma once

#include "quant_gemm.cuh"

namespace revolta {

struct QuantMoeGemmParams {
  QuantGemmParams g;          // M = R sorted rows; x and out through `map`; qweight / scales / qzeros: [E, ...] stacks
  const long long* offsets;   // [E + 1]: expert e's rows are offsets[e] .. offsets[e + 1] - 1, non-decreasing
  GemmRowMap map;             // row0 = 0; x_limit / out_limit: rows of x and out
  int E;
};

// The kernel's tiles, 8 warps (2 x 4) each:
//   * wide: 64 rows x 128 columns, K steps of 32 (the dense prefill GEMM's tile);
//   * short: 32 rows x 128 columns, K steps of 64 (K % 64 == 0). A 1024-token Qwen3.5-35B-A3B prefill gives each
//     expert ~32 rows, one half-empty wide tile; the short tile fills it and halves the K steps, so half the
//     block-steps (blocks x K steps) for the same rows. (A deep 64 x 64 x 64 tile halved the steps but doubled the
//     blocks and measured slower; a two-steps-ahead K loop spilled: the loop is issue-bound at 3 blocks per SM, not
//     waiting on its loads.)
// The launcher takes the short tile up to kMoeGemmShortMaxRowsPerExpert rows per expert on average, where it measured
// 1.1-1.5x faster on an H100 (1 to 1024 tokens of Qwen3-30B-A3B / Qwen3.5-35B-A3B); at 64 rows per expert the two
// tiles measured equal, and past that the wide tile reads each expert's weights half as often.
constexpr int kMoeGemmWM = 2, kMoeGemmWN = 4;

template <int BM_, int BN_, int BK_>
struct MoeGemmTile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_;
};
using MoeGemmWide = MoeGemmTile<64, 128, 32>;
using MoeGemmShort = MoeGemmTile<32, 128, 64>;
constexpr int kMoeGemmShortMaxRowsPerExpert = 48;

template <int BITS, class Tile>
using MoeGemmCfg = GemmCfg<BITS, Tile::BM, Tile::BN, Tile::BK, kMoeGemmWM, kMoeGemmWN>;

template <int BITS, class Tile>
__device__ const int quant_moe_gemm_smem_bytes = MoeGemmCfg<BITS, Tile>::SMEM;

// Expert e's rows [x, y), clamped to the R rows so that no offsets can take a block outside x and out.
__device__ __forceinline__ longlong2 moe_gemm_rows(const QuantMoeGemmParams& q, int e) {
  const long long R = q.g.M;
  const long long lo = min(max(q.offsets[e], 0LL), R);
  return make_longlong2(lo, min(max(q.offsets[e + 1], lo), R));
}

// The spare block `spare` of `spares` zeros its share of the rows outside every expert's rows, [0, offsets[0]) and
// [offsets[E], R) (non-decreasing offsets), in its BN output columns at n0 of out rows `width` wide: BM-row chunks,
// strided over the spare blocks.
template <int BM, int BN>
__device__ __forceinline__ void moe_gemm_zero_rows(const QuantMoeGemmParams& q, int spare, int spares, int n0,
                                                   int width) {
  constexpr int VEC = 8;  // 16-byte stores
  const long long head = moe_gemm_rows(q, 0).x, tail = moe_gemm_rows(q, q.E - 1).y, R = q.g.M;
  const long long outside = head + (R - tail);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (long long u0 = static_cast<long long>(spare) * BM; u0 < outside; u0 += static_cast<long long>(spares) * BM) {
    for (int i = threadIdx.x; i < BM * (BN / VEC); i += blockDim.x) {
      const long long u = u0 + i / (BN / VEC);
      const int col = n0 + (i % (BN / VEC)) * VEC;
      if (u >= outside || col >= width) continue;
      const long long orow = mapped_out_row(q.map, u < head ? u : tail + (u - head));
      if (orow >= 0) *reinterpret_cast<uint4*>(q.g.out + static_cast<size_t>(orow) * width + col) = zero;
    }
  }
}

// (No minimum of resident blocks in the launch bounds: a minimum of 1 let ptxas take 88 instead of 76 registers for
// the short int4 tile on sm_90, 2 blocks per SM instead of 3 and 12-22% slower.)
template <int BITS, class Tile, bool SILU_OUT>
__global__ void __launch_bounds__(kMoeGemmWM * kMoeGemmWN * 32) quant_moe_gemm_kernel(QuantMoeGemmParams q) {
  constexpr int BM = Tile::BM;
  // owner: the block's expert (-1: no tile) and its first row within that expert, or (-1, its index among the
  // spare blocks past the last tile)
  __shared__ int owner[2];
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
    // past the last tile, base is every expert's tiles
    if (lane == 0 && base <= tile) owner[1] = tile - base;
  }
  __syncthreads();
  const int e = owner[0];
  if (e < 0) {  // a spare block: owner[1] = blockIdx.y - (every expert's tiles)
    const int spare = owner[1], used = static_cast<int>(blockIdx.y) - spare;
    if constexpr (SILU_OUT)
      moe_gemm_zero_rows<BM, Tile::BN / 2>(q, spare, static_cast<int>(gridDim.y) - used, blockIdx.x * (Tile::BN / 2),
                                           q.g.N / 2);
    else
      moe_gemm_zero_rows<BM, Tile::BN>(q, spare, static_cast<int>(gridDim.y) - used, blockIdx.x * Tile::BN, q.g.N);
    return;
  }
  QuantGemmParams p = q.g;
  const longlong2 rows = moe_gemm_rows(q, e);
  GemmRowMap map = q.map;
  map.row0 = rows.x;
  p.M = static_cast<int>(rows.y - rows.x);
  constexpr int PACK = 32 / BITS;
  const int groups = p.K / p.group_size;  // expert e's tensors as the other MoE kernels find them
  p.qweight += static_cast<size_t>(e) * (p.K / PACK) * p.N;
  p.scales += static_cast<size_t>(e) * groups * p.N;
  p.qzeros += static_cast<size_t>(e) * groups * (p.N / PACK);
  quant_gemm_tile<BITS, BM, Tile::BN, Tile::BK, kMoeGemmWM, kMoeGemmWN, true, SILU_OUT>(p, owner[1],
                                                                                        blockIdx.x * Tile::BN, map);
}

}  // namespace revolta
