// The quantized MoE GEMV for a batch-1 decode step: the same op as quant_moe_gemv_kernel (quant_moe.cuh),
// shaped for latency when each routed row has its expert's weights to itself.
//
// quant_moe_gemv_kernel reads a thread's packed rows a few at a time, K-strided (a fresh group's scale and zero per
// row), and converts every field with an integer-to-float conversion: at one token its 144 blocks (Qwen3.5-35B-A3B
// gate/up) wait on several DRAM round trips and on quarter-rate conversions. Here:
//   * a block owns one row and 4 QUADS columns: QUADS column quads x 256 / QUADS slices of K, each slice a
//     contiguous run of packed rows (QUADS = 8 for K / PACK >= 256, 16 or 32 for shorter K, so a thread has about
//     kOneTokenRows rows and a down projection of K = 512 is not 2 waves of blocks); a thread issues all the weight
//     loads of a pass (up to kOneTokenRows packed rows) at once, right after it reads the row's expert id, and they are
//     in flight while the block stages the input row and the columns' scales and zero points (every group of K) in
//     shared memory;
//   * the shared expert's row (shared_id) knows its expert before the PDL wait, so its first pass and its scales
//     are loaded before it (the previous kernel - the routing - still running);
//   * dequantization is quant_common.cuh's magic-number trick (a LOP3 and an HSUB2 / HFMA2 per two fields), the
//     weight (q - z) * s rounded to fp16 as a dense fp16 checkpoint holds it, the products of one packed row summed
//     in half2 (8 products for int4, 4 for int8) and added to an fp32 accumulator - the accuracy contract of the
//     dense skinny kernels (quant_gemv.cuh), which the same tests check;
//   * the slices' sums meet in shared memory.
// The routing stays a launch of its own (moe_routing.cuh): routing inside the gate/up blocks, each routed row's block
// ranking its token's experts, measured slower end to end.
// At two tokens or more, where more rows share the SMs, quant_moe_gemv_kernel is the faster of the two.
// Launched with PDL (pdl.cuh): everything that reads ids, x or writes out comes after pdl_wait().
#pragma once

#include <cuda_fp16.h>

#include "pdl.cuh"
#include "quant_common.cuh"
#include "quant_moe.cuh"

namespace revolta {

constexpr int kOneTokenThreads = 256;
constexpr int kOneTokenRows = 8;       // packed rows a thread holds in flight per pass
constexpr int kOneTokenMaxSmem = 44 * 1024;  // dynamic shared memory (+ 4 KB static: under 48 KB)

// Column quads per block for K / PACK packed rows: slices of about kOneTokenRows rows, 8 to 32 of them.
__host__ __device__ constexpr int quant_moe_one_token_quads(int prows) {
  return prows > 128 ? 8 : prows > 64 ? 16 : 32;
}

// Dynamic shared memory: the input row as permuted half2 pairs (K halves), then the block's columns' scales
// [K / G][4 QUADS] and zero-point words [K / G][4 QUADS / PACK]. Above kOneTokenMaxSmem (small groups at large K)
// quant_moe_gemv_kernel runs.
__host__ __device__ constexpr int quant_moe_one_token_smem_bytes(int k, int group_size, int bits, int quads) {
  return k * 2 + (k / group_size) * (quads * 8 + 4 * quads / (32 / bits) * 4);
}
__device__ const int quant_moe_one_token_max_smem = kOneTokenMaxSmem;

template <int BITS, int QUADS>
__global__ void __launch_bounds__(kOneTokenThreads, 3) quant_moe_gemv_one_token_kernel(const QuantMoeParams p) {
  constexpr int PACK = 32 / BITS, PAIRS = PACK / 2;
  constexpr int kQuads = QUADS, kSlices = kOneTokenThreads / QUADS, kCols = 4 * QUADS;
  using XRow = typename XRowOf<PAIRS>::type;
  extern __shared__ __align__(16) unsigned char one_token_smem[];
  XRow* xs = reinterpret_cast<XRow*>(one_token_smem);  // [K / PACK] packed rows of the input, pair-permuted
  __shared__ float red[kSlices][kCols];

  const int row = blockIdx.y;
  const int per_token = p.top_k + (p.shared_id >= 0 ? 1 : 0);
  const int t = row / per_token, slot = row - t * per_token;
  const int tid = threadIdx.x, quad = tid % kQuads, slice = tid / kQuads;
  const int n0 = blockIdx.x * kCols, n = n0 + 4 * quad;
  const bool col_ok = n < p.N;  // N % 4 == 0: a quad is whole or absent
  const int prows = p.K / PACK, per_slice = (prows + kSlices - 1) / kSlices;
  const int rb = slice * per_slice, re = min(prows, rb + per_slice);
  const int groups = p.K / p.group_size, rows_per_group = p.group_size / PACK;
  constexpr int ZW = kCols / PACK;  // zero-point words of the block's columns per group
  uint2* ss = reinterpret_cast<uint2*>(xs + prows);  // [groups][kQuads] 4 scales per quad
  uint32_t* zs = reinterpret_cast<uint32_t*>(ss + groups * kQuads);  // [groups][ZW]

  uint4 w[kOneTokenRows];
  const uint32_t* qw = nullptr;  // this thread's quad of the row's expert (bind)
  auto load_pass = [&](int r0) {
#pragma unroll
    for (int j = 0; j < kOneTokenRows; ++j) {
      const int r = r0 + j;
      if (col_ok && r < re) w[j] = load_once(reinterpret_cast<const uint4*>(qw + static_cast<size_t>(r) * p.N));
    }
  };
  auto stage_quant = [&](long long e) {  // the block's scales and zero points of expert e, every group
    const __half* sc = p.scales + static_cast<size_t>(e) * groups * p.N + n0;
    const uint32_t* qz = reinterpret_cast<const uint32_t*>(p.qzeros) + static_cast<size_t>(e) * groups * (p.N / PACK) +
                         n0 / PACK;
    for (int i = tid; i < groups * kQuads; i += kOneTokenThreads) {
      const int g = i / kQuads, c = 4 * (i % kQuads);
      if (n0 + c < p.N) ss[i] = load_once(reinterpret_cast<const uint2*>(sc + static_cast<size_t>(g) * p.N + c));
    }
    for (int i = tid; i < groups * ZW; i += kOneTokenThreads) {
      const int g = i / ZW, c = i % ZW;
      if (n0 + c * PACK < p.N) zs[i] = load_once(qz + static_cast<size_t>(g) * (p.N / PACK) + c);
    }
  };
  auto bind = [&](long long e) {
    qw = reinterpret_cast<const uint32_t*>(p.qweight) + static_cast<size_t>(e) * prows * p.N + n;
    load_pass(rb);
    stage_quant(e);
  };

  const bool shared_row = slot >= p.top_k;  // its expert is known before the wait
  if (shared_row) bind(p.shared_id);
  pdl_wait();
  pdl_trigger();
  if (!shared_row) {
    const long long id = p.ids[static_cast<size_t>(t) * p.top_k + slot];
    if (id < 0 || id >= p.E) {  // no expert: a zero row (the router never gives one; a corrupt id must not read W)
      if (tid < kCols && n0 + tid < p.N) p.out[static_cast<size_t>(row) * p.N + n0 + tid] = __float2half(0.f);
      return;
    }
    bind(id);
  }

  // Stage the input row, pair-permuted as dequant_word's pairs (quant_common.cuh's gemv_perm).
  if (p.act == 0) {
    const XRow* src = reinterpret_cast<const XRow*>(p.x + static_cast<size_t>(t) * p.K);
    for (int r = tid; r < prows; r += kOneTokenThreads) xs[r] = gemv_perm<PAIRS>(src[r]);
  } else {
    const __half* base = p.x + static_cast<size_t>(row) * 2 * p.K;
    const XRow* gate = reinterpret_cast<const XRow*>(base);
    const XRow* up = reinterpret_cast<const XRow*>(base + p.K);
    for (int r = tid; r < prows; r += kOneTokenThreads) xs[r] = silu_mul_perm<PAIRS>(gate[r], up[r]);
  }
  __syncthreads();

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int r0 = rb; r0 < rb + per_slice; r0 += kOneTokenRows) {  // the same pass count in every slice
    if (r0 != rb) load_pass(r0);
    ColQuant cq[4];
#pragma unroll
    for (int j = 0; j < kOneTokenRows; ++j) {
      const int r = r0 + j;
      if (!col_ok || r >= re) continue;
      if (j == 0 || r % rows_per_group == 0) {  // a new group: its columns' zero points and scales
        const int g = r / rows_per_group;
        quad_quants<BITS>(ss[g * kQuads + quad], zs[g * ZW + (4 * quad) / PACK], n, p.zero_offset, cq);
      }
      quad_dot<BITS>(w[j], xs[r], cq, acc);
    }
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) red[slice][4 * quad + c] = acc[c];
  __syncthreads();
  const int col = n0 + tid;
  if (tid < kCols && col < p.N) {
    float sum = 0.f;
#pragma unroll 8
    for (int s = 0; s < kSlices; ++s) sum += red[s][tid];
    p.out[static_cast<size_t>(row) * p.N + col] = __float2half(sum);
  }
}

}  // namespace revolta
