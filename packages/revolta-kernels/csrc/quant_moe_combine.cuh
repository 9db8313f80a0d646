// The quantized MoE decode layer's last two launches in one: every row's SiLU-and-mul + down projection
// (quant_moe_gemv_one_token_kernel, act 1) and the weighted sum with the gated shared expert (moe_combine_kernel), for one
// token per block row.
//
// Why: at batch 1 the combine is a launch of its own whose work is tiny (9 rows of H halves) but whose place on the
// step's path is not (measured 5.9 us per layer of Qwen3.5-35B-A3B AWQ on an H100, 40 layers).
// Here a block owns 16 output columns of one token and ALL of its rows, so the weighted sum needs no other block:
//   * warp r computes row r (routed slot r, or the shared expert's row after them): lane = 4 column quads x 8 slices
//     of K, each slice a contiguous run of packed rows, as quant_moe_gemv_one_token_kernel's threads (the same loads in
//     flight, the same dequantization and accuracy contract: quant_common.cuh's magic-number trick, products of one
//     packed row summed in half2, fp32 accumulation); the slices meet by shuffles, and the row's 16 values are
//     rounded to fp16 as the unfused kernel stores them;
//   * each warp stages its own row's input (SiLU-and-mul of its gate / up halves) and its columns' scales and zero
//     points in its own shared memory, so only the final sum needs a block barrier;
//   * the shared expert's row knows its expert before the PDL wait: its first loads and its scales go out while the
//     previous kernel (the gate / up projection) still runs;
//   * every warp computes part of the shared expert gate's dot product x . g;
//   * 16 threads then form out = sum_k fp16(w_k) * y_k (each product rounded to fp16, the sum in fp32) +
//     fp16(sigmoid(x . g)) * y_shared with moe_combine_kernel's roundings.
// Rows are at most kMoeMaxTopK + 1 (one warp each). Launched with PDL (pdl.cuh). Self-contained (CUDA headers
// only).
#pragma once

#include <cuda_fp16.h>

#include "moe_common.cuh"
#include "pdl.cuh"
#include "quant_common.cuh"
#include "quant_moe.cuh"

namespace revolta {

// QuantMoeCombineParams: quant_moe.cuh (beside QuantMoeParams, for the C ABI header).
constexpr int kCombineCols = 16;                  // output columns per block (4 quads)
constexpr int kCombineSlices = 8;                 // K slices per row: a warp is 4 quads x 8 slices
constexpr int kCombineMaxRows = kMoeMaxTopK + 1;  // routed rows + the shared expert's
constexpr int kCombinePassRows = 8;               // packed rows a lane holds in flight per pass
constexpr int kCombineMaxSmem = 44 * 1024;        // dynamic shared memory (+ ~1 KB static: under 48 KB)

// One row's shared memory: its input as permuted pairs (K halves), its columns' scales [K / G][4 quads] and zero
// words [K / G][16 / PACK], rounded up to 16 bytes.
__host__ __device__ constexpr int quant_moe_combine_row_bytes(int k, int group_size, int bits) {
  return (k * 2 + (k / group_size) * (kCombineCols * 2 + kCombineCols / (32 / bits) * 4) + 15) / 16 * 16;
}
__device__ const int quant_moe_combine_max_smem = kCombineMaxSmem;

template <int BITS>
__global__ void __launch_bounds__(kCombineMaxRows * 32) quant_moe_down_combine_kernel(const QuantMoeCombineParams cp) {
  constexpr int PACK = 32 / BITS, PAIRS = PACK / 2, ZW = kCombineCols / PACK;
  using XRow = typename XRowOf<PAIRS>::type;
  const QuantMoeParams& p = cp.m;
  extern __shared__ __align__(16) unsigned char combine_smem[];
  __shared__ float rows_out[kCombineMaxRows][kCombineCols];
  __shared__ float gate_part[kCombineMaxRows];

  const int t = blockIdx.y, r = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int quad = lane & 3, slice = lane >> 2;
  const int n0 = blockIdx.x * kCombineCols, n = n0 + 4 * quad;
  const bool col_ok = n < p.N;  // N % 4 == 0: a quad is whole or absent
  const int prows = p.K / PACK, per_slice = (prows + kCombineSlices - 1) / kCombineSlices;
  const int rb = slice * per_slice, re = min(prows, rb + per_slice);
  const int groups = p.K / p.group_size, rows_per_group = p.group_size / PACK;
  const int per_token = p.top_k + (p.shared_id >= 0 ? 1 : 0);
  XRow* xs = reinterpret_cast<XRow*>(combine_smem + r * quant_moe_combine_row_bytes(p.K, p.group_size, BITS));
  uint2* ss = reinterpret_cast<uint2*>(xs + prows);          // [groups][4] 4 scales per quad
  uint32_t* zs = reinterpret_cast<uint32_t*>(ss + groups * 4);  // [groups][ZW]

  uint4 w[kCombinePassRows];
  const uint32_t* qw = nullptr;  // this lane's quad of the row's expert (bind)
  auto load_pass = [&](int r0) {
#pragma unroll
    for (int j = 0; j < kCombinePassRows; ++j) {
      const int pr = r0 + j;
      if (col_ok && pr < re) w[j] = load_once(reinterpret_cast<const uint4*>(qw + static_cast<size_t>(pr) * p.N));
    }
  };
  auto bind = [&](long long e) {  // the row's first pass of weights, then its columns' scales and zero points
    qw = reinterpret_cast<const uint32_t*>(p.qweight) + static_cast<size_t>(e) * prows * p.N + n;
    load_pass(rb);
    const __half* sc = p.scales + static_cast<size_t>(e) * groups * p.N + n0;
    const uint32_t* qz = p.qzeros + static_cast<size_t>(e) * groups * (p.N / PACK) + n0 / PACK;
    for (int i = lane; i < groups * 4; i += 32) {
      const int g = i / 4, c = 4 * (i % 4);
      if (n0 + c < p.N) ss[i] = load_once(reinterpret_cast<const uint2*>(sc + static_cast<size_t>(g) * p.N + c));
    }
    for (int i = lane; i < groups * ZW; i += 32) {
      const int g = i / ZW, c = i % ZW;
      if (n0 + c * PACK < p.N) zs[i] = load_once(qz + static_cast<size_t>(g) * (p.N / PACK) + c);
    }
  };

  const bool shared_row = r >= p.top_k;  // its expert is known before the wait
  if (shared_row) bind(p.shared_id);
  pdl_wait();  // ids, weights and the gate / up rows come from the kernels just before
  pdl_trigger();
  bool valid = true;
  if (!shared_row) {
    const long long id = p.ids[static_cast<size_t>(t) * p.top_k + r];
    valid = id >= 0 && id < p.E;  // no expert: a zero row (the router never gives one; a corrupt id must not read W)
    if (valid) bind(id);
  }

  // The shared expert gate's dot product, a strided share per thread (its loads overlap the weights').
  if (p.shared_id >= 0) {
    const __half* xr = cp.x + static_cast<size_t>(t) * p.N;
    float dot = 0.f;
    for (int i = threadIdx.x * 8; i < p.N; i += per_token * 32 * 8) dot = dot8(xr + i, cp.gate + i, dot);
    dot = warp_sum(dot);
    if (lane == 0) gate_part[r] = dot;
  }

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  if (valid) {
    // This row's input: SiLU-and-mul of its gate / up halves, pair-permuted as dequant_word's pairs.
    const __half* base = p.x + (static_cast<size_t>(t) * per_token + r) * 2 * p.K;
    const XRow* gate_h = reinterpret_cast<const XRow*>(base);
    const XRow* up_h = reinterpret_cast<const XRow*>(base + p.K);
    for (int i = lane; i < prows; i += 32) xs[i] = silu_mul_perm<PAIRS>(gate_h[i], up_h[i]);
    __syncwarp();

    for (int r0 = rb; r0 < rb + per_slice; r0 += kCombinePassRows) {  // the same pass count in every slice
      if (r0 != rb) load_pass(r0);
      ColQuant cq[4];
#pragma unroll
      for (int j = 0; j < kCombinePassRows; ++j) {
        const int pr = r0 + j;
        if (!col_ok || pr >= re) continue;
        if (j == 0 || pr % rows_per_group == 0) {  // a new group: its columns' zero points and scales
          const int g = pr / rows_per_group;
          quad_quants<BITS>(ss[g * 4 + quad], zs[g * ZW + (4 * quad) / PACK], n, p.zero_offset, cq);
        }
        quad_dot<BITS>(w[j], xs[pr], cq, acc);
      }
    }
  }
  // The 8 slices of each quad meet (lanes quad, quad + 4, ..., quad + 28).
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], 4);
    acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], 8);
    acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], 16);
  }
  if (slice == 0) {
#pragma unroll
    for (int c = 0; c < 4; ++c) rows_out[r][4 * quad + c] = __half2float(__float2half(acc[c]));  // as stored rows
  }
  __syncthreads();

  const int col = n0 + threadIdx.x;
  if (threadIdx.x >= kCombineCols || col >= p.N) return;
  float o = 0.f;
  for (int k = 0; k < p.top_k; ++k) {
    const float wk = __half2float(__float2half(cp.weights[static_cast<size_t>(t) * p.top_k + k]));
    o += __half2float(__float2half(rows_out[k][threadIdx.x] * wk));
  }
  o = __half2float(__float2half(o));
  if (p.shared_id >= 0) {
    float dot = 0.f;
    for (int k = 0; k < per_token; ++k) dot += gate_part[k];
    const float logit = __half2float(__float2half(dot));
    const float sg = __half2float(__float2half(1.f / (1.f + expf(-logit))));
    o = o + __half2float(__float2half(sg * rows_out[p.top_k][threadIdx.x]));
  }
  cp.out[static_cast<size_t>(t) * p.N + col] = __float2half(o);
}

}  // namespace revolta
