// gdn_decode_persistent_kernel (see gdn_decode.cuh): the gated delta rule's decode step over a grid sized to
// the GPU, prefetching the next item's state while it updates the current one.
#pragma once

#include "gated_delta.cuh"
#include "pdl.cuh"

namespace revolta {

// ------------------------------------------------------------------------------------- persistent decode
template <int DK>
struct GdnItemRegs {
  float4 s[DK / 16];
  float qk, g, beta;
  float v[4];
  long long slot;
};

template <typename T, int DK>
__global__ void __launch_bounds__(kGdnDecodeThreads, 2) gdn_decode_persistent_kernel(GdnDecodeParams p, int items) {
  static_assert(DK % 32 == 0 && 2 * DK <= kGdnDecodeThreads, "DK must be 32, 64 or 128");
  constexpr int ROWS = DK / 16;
  constexpr int WARPS = kGdnDecodeThreads / 32;
  __shared__ float qk[2 * DK];
  __shared__ float4 red[WARPS][2][16];
  __shared__ float norms[DK / 32][3];
  const int tid = threadIdx.x, quad = tid & 15, rg = tid >> 4, lane = tid & 31, warp = tid >> 5;
  const int nx = p.dv / kGdnDecodeCols, rep = p.num_v_heads / p.num_k_heads;

  auto fetch = [&](int it, GdnItemRegs<DK>& r) {
    const int bh = it / nx, h = bh % p.num_v_heads, b = bh / p.num_v_heads;
    const int col = (it % nx) * kGdnDecodeCols + quad * 4;
    r.slot = p.state_indices[b];
    if (r.slot >= 0) {
      const float* S = p.states + (static_cast<size_t>(r.slot) * p.num_v_heads + h) * DK * p.dv + col;
#pragma unroll
      for (int m = 0; m < ROWS; ++m) r.s[m] = *reinterpret_cast<const float4*>(S + static_cast<size_t>(rg + 16 * m) * p.dv);
    } else {
#pragma unroll
      for (int m = 0; m < ROWS; ++m) r.s[m] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const int kh = h / rep;
    r.qk = 0.f;
    if (tid < DK) {
      r.qk = to_float(static_cast<const T*>(p.k)[b * p.k_stride_b + kh * p.k_stride_h + tid]);
    } else if (tid < 2 * DK) {
      r.qk = to_float(static_cast<const T*>(p.q)[b * p.q_stride_b + kh * p.q_stride_h + tid - DK]);
    }
    r.g = p.g[b * p.g_stride_b + h];
    r.beta = to_float(static_cast<const T*>(p.beta)[b * p.beta_stride_b + h]);
    const T* vp = static_cast<const T*>(p.v) + b * p.v_stride_b + h * p.v_stride_h + col;
#pragma unroll
    for (int c = 0; c < 4; ++c) r.v[c] = to_float(vp[c]);
  };

  auto compute = [&](int it, GdnItemRegs<DK>& r) {
    const int bh = it / nx, h = bh % p.num_v_heads, b = bh / p.num_v_heads;
    const int col = (it % nx) * kGdnDecodeCols + quad * 4;
    __syncthreads();  // every thread is done with the previous item's q/k
    if (tid < 2 * DK) qk[tid] = r.qk;
    __syncthreads();
    if (tid < DK) {
      const float kx = qk[tid], qx = qk[DK + tid];
      const float a = warp_sum(kx * kx), c = warp_sum(qx * qx), d = warp_sum(kx * qx);
      if (lane == 0) {
        norms[warp][0] = a;
        norms[warp][1] = c;
        norms[warp][2] = d;
      }
    }
    float sk[4] = {0.f, 0.f, 0.f, 0.f}, sq[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
      const float kx = qk[rg + 16 * m], qx = qk[DK + rg + 16 * m];
      sk[0] += r.s[m].x * kx; sk[1] += r.s[m].y * kx; sk[2] += r.s[m].z * kx; sk[3] += r.s[m].w * kx;
      sq[0] += r.s[m].x * qx; sq[1] += r.s[m].y * qx; sq[2] += r.s[m].z * qx; sq[3] += r.s[m].w * qx;
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      sk[c] += __shfl_xor_sync(0xffffffffu, sk[c], 16);
      sq[c] += __shfl_xor_sync(0xffffffffu, sq[c], 16);
    }
    if (lane < 16) {
      red[warp][0][quad] = make_float4(sk[0], sk[1], sk[2], sk[3]);
      red[warp][1][quad] = make_float4(sq[0], sq[1], sq[2], sq[3]);
    }
    __syncthreads();
    float ssk = 0.f, ssq = 0.f, dot = 0.f;
#pragma unroll
    for (int w = 0; w < DK / 32; ++w) {
      ssk += norms[w][0];
      ssq += norms[w][1];
      dot += norms[w][2];
    }
    float SK[4] = {0.f, 0.f, 0.f, 0.f}, SQ[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float4 a = red[w][0][quad], c = red[w][1][quad];
      SK[0] += a.x; SK[1] += a.y; SK[2] += a.z; SK[3] += a.w;
      SQ[0] += c.x; SQ[1] += c.y; SQ[2] += c.z; SQ[3] += c.w;
    }
    const float eg = expf(r.g);
    const float kn = p.use_l2norm ? rsqrtf(ssk + 1e-6f) : 1.f;
    const float qn = (p.use_l2norm ? rsqrtf(ssq + 1e-6f) : 1.f) * rsqrtf(static_cast<float>(DK));
    const float kq = dot * kn * qn;
    float delta[4], o[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      delta[c] = r.beta * (r.v[c] - eg * kn * SK[c]);
      o[c] = eg * qn * SQ[c] + delta[c] * kq;
    }
    if (r.slot >= 0) {
      float* S = p.states + (static_cast<size_t>(r.slot) * p.num_v_heads + h) * DK * p.dv + col;
#pragma unroll
      for (int m = 0; m < ROWS; ++m) {
        const float kx = kn * qk[rg + 16 * m];
        float4 u;
        u.x = fmaf(eg, r.s[m].x, kx * delta[0]);
        u.y = fmaf(eg, r.s[m].y, kx * delta[1]);
        u.z = fmaf(eg, r.s[m].z, kx * delta[2]);
        u.w = fmaf(eg, r.s[m].w, kx * delta[3]);
        *reinterpret_cast<float4*>(S + static_cast<size_t>(rg + 16 * m) * p.dv) = u;
      }
    }
    if (rg == 0) {
      T* out = static_cast<T*>(p.out) + (static_cast<size_t>(b) * p.num_v_heads + h) * p.dv + col;
#pragma unroll
      for (int c = 0; c < 4; ++c) out[c] = from_float<T>(r.slot >= 0 ? o[c] : 0.f);
    }
  };

  GdnItemRegs<DK> A, B;
  int it = blockIdx.x;
  if (it < items) fetch(it, A);
  while (it < items) {  // two items per trip so the register sets swap roles without copies
    int next = it + gridDim.x;
    if (next < items) fetch(next, B);
    compute(it, A);
    it = next;
    if (it >= items) break;
    next = it + gridDim.x;
    if (next < items) fetch(next, A);
    compute(it, B);
    it = next;
  }
}

}  // namespace revolta
