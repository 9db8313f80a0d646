// Skinny fp16 GEMV for decode (M <= 8 rows): out[M, N] = a[M, K] @ W[N, K]^T with W in torch's Linear
// layout (row n = output n, K contiguous). Memory-bound; sm_70 features only (fp16 loads, fp32 math).
//
// Grid = N / ROWS blocks of WARPS warps; a block owns ROWS consecutive weight rows (one contiguous
// ROWS x K x 2-byte stretch) and its warps split K: warp w takes the 256-element chunks w, w + WARPS, ...
// (a chunk = one 16-byte load per lane, 512 contiguous bytes per warp). A step loads one chunk of all ROWS
// rows plus the chunk of the MT activation rows (L1/L2 hits: every block reads the same small x), and the
// next step's loads are issued before this step's math (register double buffer: ROWS x 512 B per warp in
// flight, 2 x that at the swap). Products and sums in fp32 (the same accumulation as cuBLAS's fp16 GEMM);
// each lane's partial sums are reduced across the warp with shuffles, then across the warps through shared
// memory. No split across blocks, so no workspace and no second pass.
//
// Programmatic dependent launch (pdl.cuh): the weights are read-only, so the first step's weight loads are
// issued before pdl_wait(); x and the output are touched only after it. An L2 prefetch of more of the weights
// before the wait measured no faster. SiLU-and-mul is not fused in: every block needs the whole K of the
// activation, so it would be recomputed N / ROWS times (Llama-3.1-8B down projection at M = 1: 32.5 us against
// 27.5 us for this GEMV after the separate silu_and_mul kernel).
#pragma once

#include <cuda_fp16.h>

#include "pdl.cuh"
#include "quant_common.cuh"

namespace revolta {

struct DenseGemvParams {
  const __half* x;  // [M, x_stride] (x_stride >= K)
  const __half* w;  // [N, K]
  __half* out;      // [M, N]
  int M, N, K, x_stride;
};

constexpr int kDenseChunk = 256;  // K elements per warp-wide 16-byte load

template <int MT, int ROWS, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) dense_gemv_kernel(DenseGemvParams p) {
  __shared__ float red[WARPS][MT * ROWS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n0 = blockIdx.x * ROWS;
  const int chunks = (p.K + kDenseChunk - 1) / kDenseChunk;
  const int my = warp < chunks ? (chunks - warp + WARPS - 1) / WARPS : 0;  // this warp's chunks

  uint4 wnext[ROWS];
  auto fetch_w = [&](int c) {
    const int k = c * kDenseChunk + lane * 8;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int n = n0 + r;
      wnext[r] = n < p.N && k < p.K ? load_once(reinterpret_cast<const uint4*>(p.w + static_cast<size_t>(n) * p.K + k))
                                    : make_uint4(0, 0, 0, 0);
    }
  };
  uint4 xnext[MT];
  auto fetch_x = [&](int c) {
    const int k = c * kDenseChunk + lane * 8;
#pragma unroll
    for (int m = 0; m < MT; ++m)
      xnext[m] = m < p.M && k < p.K
                     ? __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(m) * p.x_stride + k))
                     : make_uint4(0, 0, 0, 0);
  };

  // Before the PDL wait: read-only weights only.
  if (my > 0) fetch_w(warp);
  pdl_wait();  // x comes from the previous kernel; out may still be read by it
  pdl_trigger();
  if (my > 0) fetch_x(warp);

  float acc[MT][ROWS];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[m][r] = 0.f;

  for (int i = 0; i < my; ++i) {
    uint4 w[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) w[r] = wnext[r];
    uint4 xr[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) xr[m] = xnext[m];
    if (i + 1 < my) {
      fetch_w(warp + (i + 1) * WARPS);
      fetch_x(warp + (i + 1) * WARPS);
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m >= p.M) break;
      const uint32_t xw[4] = {xr[m].x, xr[m].y, xr[m].z, xr[m].w};
      float2 xf[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) xf[q] = __half22float2(u2h(xw[q]));
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const uint32_t ww[4] = {w[r].x, w[r].y, w[r].z, w[r].w};
        float a = acc[m][r];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 wf = __half22float2(u2h(ww[q]));
          a = fmaf(wf.x, xf[q].x, a);
          a = fmaf(wf.y, xf[q].y, a);
        }
        acc[m][r] = a;
      }
    }
  }

  // Warp sums (butterfly), then the warps' sums through shared memory.
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float v = acc[m][r];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) red[warp][m * ROWS + r] = v;
    }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < MT * ROWS) {
    const int m = t / ROWS, r = t % ROWS, n = n0 + r;
    if (m < p.M && n < p.N) {
      float v = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) v += red[w][t];
      p.out[static_cast<size_t>(m) * p.N + n] = __float2half_rn(v);
    }
  }
}

}  // namespace revolta
