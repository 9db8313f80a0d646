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

// Variant 2 (default): the norm staged once per block in shared memory, then a persistent GEMV.
// Grid = the resident blocks (at most one per ROWS-row group); block b takes row groups b, b + grid, ...
// After pdl_wait() a block loads x and the residual (16-byte loads), rounds h = x + residual to fp16 into
// shared memory (block 0 also writes h_out), then reproduces revolta::fused_add_rms_norm_kernel's arithmetic
// exactly: that kernel's threads_for(K / 4) "virtual" threads each sum the squares of their 8 strided
// elements in order, butterfly warp sums, a per-warp scratch and a last warp sum, rsqrtf(ss / K + eps), and
// the normed activation rounded to fp16 as (h * inv) * g. Then dense_gemv_kernel's GEMV (same chunk/warp
// mapping and summation order) reads the activation from shared memory. So with the same block shape as the
// unfused GEMV the output equals fused_add_rms_norm + dense_gemv bit for bit, and the activation rows are
// read from L2 once per resident block instead of once per 4-row block (v1). The first row group's first
// weight chunk and the norm weight are loaded before the wait. Shared memory: M x K fp16 (dynamic).
constexpr int kNormStageRegs = 4;  // norm-weight uint4s per thread loaded before the wait (more: after)

__host__ __device__ inline int dense_norm_threads(int k) {  // = api.cu's threads_for(k / 4)
  int t = 32;
  while (t < k / 4 && t < 1024) t *= 2;
  return t;
}

template <int MT, int ROWS, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) dense_gemv_norm2_kernel(DenseGemvNormParams p) {
  extern __shared__ __align__(16) unsigned char dense_norm_smem[];
  __half* act = reinterpret_cast<__half*>(dense_norm_smem);  // [M, K]: h, then the normed activation
  __shared__ float red[WARPS][MT * ROWS];
  __shared__ float scratch[MT][32];
  constexpr int NT = WARPS * 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int K = p.K;
  const int groups = (p.N + ROWS - 1) / ROWS;
  const int chunks = (K + kDenseChunk - 1) / kDenseChunk;
  const int my = warp < chunks ? (chunks - warp + WARPS - 1) / WARPS : 0;
  const bool has_res = p.residual != nullptr;
  const int k8 = K / 8;

  uint4 wnext[ROWS];
  auto fetch_w = [&](int grp, int c) {
    const int k = c * kDenseChunk + lane * 8;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int n = grp * ROWS + r;
      wnext[r] = n < p.N && k < K ? load_once(reinterpret_cast<const uint4*>(p.w + static_cast<size_t>(n) * K + k))
                                  : make_uint4(0, 0, 0, 0);
    }
  };
  // Before the PDL wait: read-only data only (the first weight chunk, the norm weight).
  if (my > 0) fetch_w(blockIdx.x, warp);
  uint4 gpre[kNormStageRegs];
#pragma unroll
  for (int j = 0; j < kNormStageRegs; ++j) {
    const int u = threadIdx.x + j * NT;
    gpre[j] = u < k8 ? __ldg(reinterpret_cast<const uint4*>(p.norm_w) + u) : make_uint4(0, 0, 0, 0);
  }
  pdl_wait();  // x and the residual come from the previous kernel; out / h_out may still be read by it
  pdl_trigger();

  // 1. h = x + residual, rounded to fp16, into shared memory (and h_out from block 0).
  for (int u = threadIdx.x; u < p.M * k8; u += NT) {
    uint4 xv = __ldg(reinterpret_cast<const uint4*>(p.x) + u);
    if (has_res) {
      const uint4 rv = __ldg(reinterpret_cast<const uint4*>(p.residual) + u);
      uint32_t hw[4] = {xv.x, xv.y, xv.z, xv.w};
      const uint32_t rw[4] = {rv.x, rv.y, rv.z, rv.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 a = __half22float2(u2h(hw[q])), b = __half22float2(u2h(rw[q]));
        const __half2 s = __floats2half2_rn(a.x + b.x, a.y + b.y);
        hw[q] = *reinterpret_cast<const uint32_t*>(&s);
      }
      xv = make_uint4(hw[0], hw[1], hw[2], hw[3]);
    }
    reinterpret_cast<uint4*>(act)[u] = xv;
    if (blockIdx.x == 0) reinterpret_cast<uint4*>(p.h_out)[u] = xv;
  }
  __syncthreads();
  // 2. Sums of squares in fused_add_rms_norm_kernel's order (virtual thread vt of T: elements vt + j T).
  const int T = dense_norm_threads(K), nv = T / 32;
  for (int m = 0; m < p.M; ++m) {
    const __half* hrow = act + static_cast<size_t>(m) * K;
    for (int vw = warp; vw < nv; vw += WARPS) {
      const int vt = vw * 32 + lane;
      float ss = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int i = vt + j * T;
        const float v = i < K ? __half2float(hrow[i]) : 0.f;
        ss += v * v;
      }
      for (int i = vt + 8 * T; i < K; i += T) {
        const float v = __half2float(hrow[i]);
        ss += v * v;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      if (lane == 0) scratch[m][vw] = ss;
    }
  }
  __syncthreads();
  // 3. The normed activation, rounded like the norm kernel's output: (h * inv) * g.
  const float g_add = p.zero_centered ? 1.f : 0.f;
  for (int m = 0; m < p.M; ++m) {
    float s = lane < nv ? scratch[m][lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float inv = rsqrtf(s / static_cast<float>(K) + p.eps);
    uint4* row = reinterpret_cast<uint4*>(act + static_cast<size_t>(m) * K);
#pragma unroll
    for (int j = 0; j < kNormStageRegs; ++j) {
      const int u = threadIdx.x + j * NT;
      if (u < k8) {
        const uint4 hv = row[u], gv = gpre[j];
        const uint32_t hw[4] = {hv.x, hv.y, hv.z, hv.w}, gw[4] = {gv.x, gv.y, gv.z, gv.w};
        uint32_t ow[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 hf = __half22float2(u2h(hw[q])), gf = __half22float2(u2h(gw[q]));
          const __half2 o2 = __floats2half2_rn(hf.x * inv * (gf.x + g_add), hf.y * inv * (gf.y + g_add));
          ow[q] = *reinterpret_cast<const uint32_t*>(&o2);
        }
        row[u] = make_uint4(ow[0], ow[1], ow[2], ow[3]);
      }
    }
    for (int u = threadIdx.x + kNormStageRegs * NT; u < k8; u += NT) {
      const uint4 hv = row[u], gv = __ldg(reinterpret_cast<const uint4*>(p.norm_w) + u);
      const uint32_t hw[4] = {hv.x, hv.y, hv.z, hv.w}, gw[4] = {gv.x, gv.y, gv.z, gv.w};
      uint32_t ow[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 hf = __half22float2(u2h(hw[q])), gf = __half22float2(u2h(gw[q]));
        const __half2 o2 = __floats2half2_rn(hf.x * inv * (gf.x + g_add), hf.y * inv * (gf.y + g_add));
        ow[q] = *reinterpret_cast<const uint32_t*>(&o2);
      }
      row[u] = make_uint4(ow[0], ow[1], ow[2], ow[3]);
    }
  }
  __syncthreads();

  // 4. dense_gemv_kernel over this block's row groups, activations from shared memory.
  for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    float acc[MT][ROWS];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) acc[m][r] = 0.f;
    for (int i = 0; i < my; ++i) {
      uint4 w[ROWS];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) w[r] = wnext[r];
      const int k = (warp + i * WARPS) * kDenseChunk + lane * 8;
      if (i + 1 < my) {
        fetch_w(grp, warp + (i + 1) * WARPS);
      } else if (grp + static_cast<int>(gridDim.x) < groups) {
        fetch_w(grp + gridDim.x, warp);  // the next row group's first chunk
      }
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m >= p.M) break;
        const uint4 xv = k < K ? *reinterpret_cast<const uint4*>(act + static_cast<size_t>(m) * K + k)
                               : make_uint4(0, 0, 0, 0);
        const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
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
      const int m = t / ROWS, r = t % ROWS, n = grp * ROWS + r;
      if (m < p.M && n < p.N) {
        float v = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) v += red[w][t];
        p.out[static_cast<size_t>(m) * p.N + n] = __float2half_rn(v);
      }
    }
    __syncthreads();
  }
}

}  // namespace revolta
