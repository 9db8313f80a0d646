// Skinny fp16 GEMV with the residual add + RMSNorm fused in front (dense_gemv.cuh has the plain kernel).
#pragma once

#include "dense_gemv.cuh"

namespace revolta {

// Fused residual add + RMSNorm in front of the GEMV (the pre-norm decoder's qkv / gate_up / GDN in_proj):
//   h = x + residual (rounded to fp16, as revolta::fused_add_rms_norm; h = x without a residual),
//   out = (h * rsqrt(mean(h^2) + eps) * g) @ W^T,  g = norm weight (1 + w when zero_centered).
// One pass, same structure as dense_gemv_kernel: each warp's chunk step loads x, the residual and the norm
// weight (L1/L2 hits: every block reads the same small rows) beside the weight rows, accumulates both
// sum_k W[n, k] * h_k * g_k and sum_k h_k^2 in fp32, and the block scales its sums by the row's
// rsqrt(mean + eps) at the end (the rows' sums of squares ride along the cross-warp reduction). So no
// extra barrier or shared-memory staging before the weight stream; the difference to the reference is
// that the normed activation is not rounded to fp16 before the products (< 1 fp16 ulp per activation,
// inside the GEMV's bound). Block 0 (whose warps cover every chunk of K) writes h to h_out, a new tensor:
// bit-exact with the reference. Weight loads before pdl_wait() as in dense_gemv_kernel.
struct DenseGemvNormParams {
  const __half* x;         // [M, K]
  const __half* residual;  // [M, K] or nullptr (h = x)
  const __half* norm_w;    // [K]
  const __half* w;         // [N, K]
  __half* out;             // [M, N]
  __half* h_out;           // [M, K]
  int M, N, K;
  float eps;
  int zero_centered;
};

template <int MT, int ROWS, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) dense_gemv_norm_kernel(DenseGemvNormParams p) {
  __shared__ float red[WARPS][MT * ROWS + MT];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n0 = blockIdx.x * ROWS;
  const int chunks = (p.K + kDenseChunk - 1) / kDenseChunk;
  const int my = warp < chunks ? (chunks - warp + WARPS - 1) / WARPS : 0;  // this warp's chunks
  const bool has_res = p.residual != nullptr;
  const bool writer = blockIdx.x == 0;

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
  uint4 xnext[MT][2];  // x, residual
  uint4 gnext;         // norm weight
  auto fetch_x = [&](int c) {
    const int k = c * kDenseChunk + lane * 8;
    const bool in = k < p.K;
    gnext = in ? __ldg(reinterpret_cast<const uint4*>(p.norm_w + k)) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const bool row = m < p.M && in;
      const size_t off = static_cast<size_t>(m) * p.K + k;
      xnext[m][0] = row ? __ldg(reinterpret_cast<const uint4*>(p.x + off)) : make_uint4(0, 0, 0, 0);
      xnext[m][1] = row && has_res ? __ldg(reinterpret_cast<const uint4*>(p.residual + off)) : make_uint4(0, 0, 0, 0);
    }
  };

  // Before the PDL wait: read-only weights only.
  if (my > 0) fetch_w(warp);
  pdl_wait();  // x and the residual come from the previous kernel; out / h_out may still be read by it
  pdl_trigger();
  if (my > 0) fetch_x(warp);

  float acc[MT][ROWS], ss[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    ss[m] = 0.f;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[m][r] = 0.f;
  }
  const float g_add = p.zero_centered ? 1.f : 0.f;

  for (int i = 0; i < my; ++i) {
    uint4 w[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) w[r] = wnext[r];
    uint4 xr[MT][2];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      xr[m][0] = xnext[m][0];
      xr[m][1] = xnext[m][1];
    }
    const uint4 gr = gnext;
    const int k = (warp + i * WARPS) * kDenseChunk + lane * 8;
    if (i + 1 < my) {
      fetch_w(warp + (i + 1) * WARPS);
      fetch_x(warp + (i + 1) * WARPS);
    }
    float g[8];
    {
      const uint32_t gw[4] = {gr.x, gr.y, gr.z, gr.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = __half22float2(u2h(gw[q]));
        g[2 * q] = f.x + g_add;
        g[2 * q + 1] = f.y + g_add;
      }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m >= p.M) break;
      uint32_t hw[4] = {xr[m][0].x, xr[m][0].y, xr[m][0].z, xr[m][0].w};
      if (has_res) {
        const uint32_t rw[4] = {xr[m][1].x, xr[m][1].y, xr[m][1].z, xr[m][1].w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 a = __half22float2(u2h(hw[q])), b = __half22float2(u2h(rw[q]));
          const __half2 s = __floats2half2_rn(a.x + b.x, a.y + b.y);  // rounded like the reference's h
          hw[q] = *reinterpret_cast<const uint32_t*>(&s);
        }
      }
      if (writer && k < p.K)
        *reinterpret_cast<uint4*>(p.h_out + static_cast<size_t>(m) * p.K + k) = make_uint4(hw[0], hw[1], hw[2], hw[3]);
      float a[8];
      float s2 = ss[m];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 hf = __half22float2(u2h(hw[q]));
        s2 = fmaf(hf.x, hf.x, s2);
        s2 = fmaf(hf.y, hf.y, s2);
        a[2 * q] = hf.x * g[2 * q];
        a[2 * q + 1] = hf.y * g[2 * q + 1];
      }
      ss[m] = s2;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const uint32_t ww[4] = {w[r].x, w[r].y, w[r].z, w[r].w};
        float v = acc[m][r];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 wf = __half22float2(u2h(ww[q]));
          v = fmaf(wf.x, a[2 * q], v);
          v = fmaf(wf.y, a[2 * q + 1], v);
        }
        acc[m][r] = v;
      }
    }
  }

  // Warp sums (butterfly), then the warps' sums through shared memory; the rows' sums of squares too.
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float v = acc[m][r];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) red[warp][m * ROWS + r] = v;
    }
    float v = ss[m];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) red[warp][MT * ROWS + m] = v;
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < MT * ROWS) {
    const int m = t / ROWS, r = t % ROWS, n = n0 + r;
    if (m < p.M && n < p.N) {
      float v = 0.f, s = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) {
        v += red[w][t];
        s += red[w][MT * ROWS + m];
      }
      const float inv = rsqrtf(s / static_cast<float>(p.K) + p.eps);
      p.out[static_cast<size_t>(m) * p.N + n] = __float2half_rn(v * inv);
    }
  }
}

}  // namespace revolta
