// Quantized mixture-of-experts GEMV for few tokens (decode): each (token, slot) row multiplies its input by the
// packed int4 / int8 weight of the expert the router picked for it, read from device memory - no host sync, so the
// decode step of a quantized MoE model can be captured in a CUDA graph.
//
//   out[t, k, :] = in[t, k] @ W[ids[t, k]]        W[e] = (q[e] - (z[e] + zero_offset)) * s[e]   (kernel layout)
//   act 0: in[t, k] = x[t]                          (x [T, K]: the token's hidden state, shared by its slots)
//   act 1: in[t, k] = silu(g) * u, rounded to fp16  (x [T, R, 2K] = [gate, up] of that slot, as silu_and_mul)
// shared_id >= 0: each token has R = top_k + 1 rows, the last one for expert shared_id (a shared expert stacked
// with the routed ones, so it runs in the same launches); else R = top_k.
//
// Weights are the stacked experts in the dense layers' kernel layout (csrc/quant_common.cuh, reference/quant.py):
// qweight [E, K / pack, N] packed along K, scales [E, K / G, N] fp16, qzeros [E, K / G, N / pack] packed along N.
// A block owns one row and 64 output columns: 16 column quads x 16 slices of K, each thread reading 16 bytes (four
// columns' packed words) per packed row; the slices' sums meet in shared memory. fp32 accumulation; no tensor cores
// (a row's expert weights are read once: memory-bound). Self-contained (CUDA headers only).
// For one token quant_moe_gemv_one_token_kernel (quant_moe_gemv_one_token.cuh) runs instead. Launched with PDL (pdl.cuh): the
// kernel waits for its predecessor before it reads anything.
#pragma once

#include <cuda_fp16.h>

#include "pdl.cuh"

namespace revolta {

struct QuantMoeParams {
  const __half* x;          // act 0: [T, K]; act 1: [T, top_k, 2K]
  const unsigned* qweight;  // [E, K / pack, N]
  const __half* scales;     // [E, K / G, N]
  const unsigned* qzeros;   // [E, K / G, N / pack]
  const long long* ids;     // [T, top_k] expert of each routed row
  __half* out;              // [T, R, N]
  int T, top_k, E, N, K, group_size, zero_offset, act;
  int shared_id;            // the expert of each token's extra last row; -1: none
};

// The down projection and weighted sum in one launch (quant_moe_combine.cuh).
struct QuantMoeCombineParams {
  QuantMoeParams m;      // the down projection: act 1, x = [T, R, 2K] gate / up rows; m.out unused
  const float* weights;  // [T, top_k] the router's weights
  const __half* x;       // [T, N] the shared expert gate's input (when m.shared_id >= 0)
  const __half* gate;    // [N] the shared expert gate's weight row (when m.shared_id >= 0)
  __half* out;           // [T, N]
};

constexpr int kQuantMoeThreads = 256;
constexpr int kQuantMoeQuads = 16;                                 // column quads per block
constexpr int kQuantMoeSlices = kQuantMoeThreads / kQuantMoeQuads;  // slices of K per block
constexpr int kQuantMoeCols = 4 * kQuantMoeQuads;                  // output columns per block
constexpr int kQuantMoeMaxK = 8192;                                // the staged input row: 32 KB of floats
constexpr int kQuantMoeMaxRows = 65535;                            // (token, slot) rows: the grid's y dimension
__device__ const int quant_moe_max_smem = kQuantMoeMaxK * 4;       // its most dynamic shared memory (tools/check_volta.py)

template <int BITS>
__global__ void __launch_bounds__(kQuantMoeThreads) quant_moe_gemv_kernel(const QuantMoeParams p) {
  constexpr int PACK = 32 / BITS;
  constexpr unsigned MASK = (1u << BITS) - 1u;
  extern __shared__ float xs[];  // [K] the row's input, as floats
  __shared__ float red[kQuantMoeSlices][kQuantMoeCols];
  pdl_wait();  // ids and x come from the kernels just before
  pdl_trigger();

  const int row = blockIdx.y;
  const int per_token = p.top_k + (p.shared_id >= 0 ? 1 : 0);
  const int t = row / per_token, slot = row - t * per_token;
  const long long e = slot < p.top_k ? p.ids[static_cast<size_t>(t) * p.top_k + slot] : p.shared_id;
  const int n0 = blockIdx.x * kQuantMoeCols;
  const int tid = threadIdx.x;
  if (e < 0 || e >= p.E) {  // no expert: a zero row (the router never gives one; a corrupt id must not read past W)
    if (tid < kQuantMoeCols && n0 + tid < p.N) p.out[static_cast<size_t>(row) * p.N + n0 + tid] = __float2half(0.f);
    return;
  }

  // Stage the input row: 8 halves per 16-byte load.
  if (p.act == 0) {
    const uint4* src = reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(t) * p.K);
    for (int i = tid; i < p.K / 8; i += kQuantMoeThreads) {
      const uint4 v = src[i];
      const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[j]));
        xs[i * 8 + 2 * j] = f.x;
        xs[i * 8 + 2 * j + 1] = f.y;
      }
    }
  } else {
    const __half* base = p.x + static_cast<size_t>(row) * 2 * p.K;
    const uint4* gate = reinterpret_cast<const uint4*>(base);
    const uint4* up = reinterpret_cast<const uint4*>(base + p.K);
    for (int i = tid; i < p.K / 8; i += kQuantMoeThreads) {
      const uint4 g = gate[i], u = up[i];
      const unsigned gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 gf = __half22float2(*reinterpret_cast<const __half2*>(&gw[j]));
        const float2 uf = __half22float2(*reinterpret_cast<const __half2*>(&uw[j]));
        // rounded to fp16 as revolta::silu_and_mul rounds its output
        xs[i * 8 + 2 * j] = __half2float(__float2half(gf.x / (1.f + expf(-gf.x)) * uf.x));
        xs[i * 8 + 2 * j + 1] = __half2float(__float2half(gf.y / (1.f + expf(-gf.y)) * uf.y));
      }
    }
  }
  __syncthreads();

  const int quad = tid % kQuantMoeQuads, slice = tid / kQuantMoeQuads;
  const int n = n0 + 4 * quad;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  if (n < p.N) {  // N % 4 == 0: a quad is whole or absent
    const size_t rows = static_cast<size_t>(p.K / PACK);
    const size_t groups = static_cast<size_t>(p.K / p.group_size);
    const unsigned* qw = p.qweight + static_cast<size_t>(e) * rows * p.N + n;
    const __half* sc = p.scales + static_cast<size_t>(e) * groups * p.N + n;
    const unsigned* qz = p.qzeros + static_cast<size_t>(e) * groups * (p.N / PACK) + n / PACK;
    const int zshift = (n % PACK) * BITS;  // the quad's first zero point in its packed word
    const int rows_per_group = p.group_size / PACK;
#pragma unroll 4
    for (int r = slice; r < p.K / PACK; r += kQuantMoeSlices) {
      const uint4 q = __ldg(reinterpret_cast<const uint4*>(qw + static_cast<size_t>(r) * p.N));
      const int g = r / rows_per_group;
      const uint2 s2 = __ldg(reinterpret_cast<const uint2*>(sc + static_cast<size_t>(g) * p.N));
      const unsigned zw = __ldg(qz + static_cast<size_t>(g) * (p.N / PACK));
      const float2 s01 = __half22float2(*reinterpret_cast<const __half2*>(&s2.x));
      const float2 s23 = __half22float2(*reinterpret_cast<const __half2*>(&s2.y));
      const float s[4] = {s01.x, s01.y, s23.x, s23.y};
      const unsigned qc[4] = {q.x, q.y, q.z, q.w};
      const float* xr = xs + r * PACK;
      float xsum = 0.f;
#pragma unroll
      for (int j = 0; j < PACK; ++j) xsum += xr[j];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float dot = 0.f;
#pragma unroll
        for (int j = 0; j < PACK; ++j) dot = fmaf(xr[j], static_cast<float>((qc[c] >> (j * BITS)) & MASK), dot);
        const float z = static_cast<float>(((zw >> (zshift + c * BITS)) & MASK) + p.zero_offset);
        acc[c] = fmaf(s[c], dot - z * xsum, acc[c]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) red[slice][4 * quad + c] = acc[c];
  __syncthreads();
  if (tid < kQuantMoeCols && n0 + tid < p.N) {
    float sum = 0.f;
#pragma unroll
    for (int s = 0; s < kQuantMoeSlices; ++s) sum += red[s][tid];
    p.out[static_cast<size_t>(row) * p.N + n0 + tid] = __float2half(sum);
  }
}

}  // namespace revolta
