// Mixture-of-experts router GEMVs (moe.cuh), launched with programmatic dependent launch (pdl.cuh): each warp
// loads its weight row's first 256 * RL elements before pdl_wait(), so that stream overlaps the previous kernel's
// tail.
//   moe_router_kernel:      logits[t, e] = x_t . wr[e] (storage type, fp32 accumulation), one warp per expert row,
//                           the row held in registers across tokens.
//   moe_router_norm_kernel: the residual add + RMSNorm before the block fused into the router GEMV: every block
//                           computes h = x + residual (rounded to T) and norm(h) for each token in shared memory with
//                           the exact arithmetic and summation order of fused_add_rms_norm_kernel (norm.cuh, launched
//                           with threads_for(H / 4) threads: `norm_threads` here), so h and the normed x are
//                           bit-identical to it; block 0 writes them to new tensors (the expert kernels read the
//                           normed x, the next layer h).
#pragma once

#include "moe_common.cuh"

namespace revolta {

constexpr int kMoeRouterWarps = 4;
// 16-byte loads per lane held across the wait: rows of H <= 2048 in one go (fp16/bf16); fp32 packs are 32 bytes,
// so half as many keep registers in bounds
template <typename T> struct MoeRouterLoads { static constexpr int n = 8; };
template <> struct MoeRouterLoads<float> { static constexpr int n = 4; };

// grid (ceil(E / kMoeRouterWarps)), block kMoeRouterWarps * 32. logits [T, E] contiguous.
template <typename T>
__global__ void __launch_bounds__(kMoeRouterWarps * 32) moe_router_kernel(const T* __restrict__ x, long long x_stride,
                                                                          const T* __restrict__ w,
                                                                          T* __restrict__ logits, int tokens, int H,
                                                                          int E) {
  constexpr int RL = MoeRouterLoads<T>::n;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int e = blockIdx.x * kMoeRouterWarps + warp;
  const T* row = w + static_cast<size_t>(e < E ? e : 0) * H;
  Pack8<T> w0[RL];  // the row's first 256 * RL elements, loaded before the wait
#pragma unroll
  for (int u = 0; u < RL; ++u) {
    const int c = lane * 8 + u * 256;
    if (e < E && c < H) w0[u].load(row + c);
  }
  pdl_trigger();
  pdl_wait();
  if (e >= E) return;
  for (int t = 0; t < tokens; ++t) {
    const T* xt = x + t * x_stride;
    float acc = 0.f;
#pragma unroll
    for (int u = 0; u < RL; ++u) {
      const int c = lane * 8 + u * 256;
      if (c < H) {
        Pack8<T> xv;
        xv.load(xt + c);
        float a[8], b[8];
        w0[u].get(a);
        xv.get(b);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc = fmaf(a[i], b[i], acc);
      }
    }
    for (int base = 256 * RL; base < H; base += 256 * RL) {  // rows past 2048
      Pack8<T> wr[RL], xv[RL];
#pragma unroll
      for (int u = 0; u < RL; ++u) {
        const int c = base + lane * 8 + u * 256;
        if (c < H) {
          wr[u].load(row + c);
          xv[u].load(xt + c);
        }
      }
#pragma unroll
      for (int u = 0; u < RL; ++u) {
        const int c = base + lane * 8 + u * 256;
        if (c < H) {
          float a[8], b[8];
          wr[u].get(a);
          xv[u].get(b);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc = fmaf(a[i], b[i], acc);
        }
      }
    }
    acc = warp_sum(acc);
    if (lane == 0) logits[static_cast<size_t>(t) * E + e] = from_float<T>(acc);
  }
}

struct MoeRouterNormParams {
  const void* x;  // [T, H] (row stride x_stride): the block input (e.g. the attention output)
  const void* residual;  // [T, H] (row stride res_stride)
  const void* norm_w;  // [H]
  const void* w;  // [E, H] router weight
  void* logits;  // [T, E] contiguous
  void* h_out;  // [T, H] contiguous: x + residual
  void* normed_out;  // [T, H] contiguous: norm(h)
  long long x_stride, res_stride;
  float eps;
  int tokens, H, E, norm_threads, zero_centered;
};

constexpr int kNormRegsMoe = 8;  // = kNormRegs of norm.cuh (the reference kernel's per-thread register cache)

// grid (ceil(E / kMoeRouterWarps)), block kMoeRouterWarps * 32, dynamic smem H floats.
// x, residual, norm_w rows 16-byte aligned, H % 8 == 0, norm_threads a power of two in [32, 1024].
template <typename T>
__global__ void __launch_bounds__(kMoeRouterWarps * 32) moe_router_norm_kernel(MoeRouterNormParams p) {
  constexpr int RL = MoeRouterLoads<T>::n;
  constexpr int NT = kMoeRouterWarps * 32;
  extern __shared__ float4 hs4[];
  float* hs = reinterpret_cast<float*>(hs4);
  __shared__ float vsum[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int H = p.H, E = p.E, B = p.norm_threads;
  const int e = blockIdx.x * kMoeRouterWarps + warp;
  const T* row = static_cast<const T*>(p.w) + static_cast<size_t>(e < E ? e : 0) * H;
  Pack8<T> w0[RL];  // the row's first 256 * RL elements, loaded before the wait (nobody writes the weights)
#pragma unroll
  for (int u = 0; u < RL; ++u) {
    const int c = lane * 8 + u * 256;
    if (e < E && c < H) w0[u].load(row + c);
  }
  pdl_trigger();
  pdl_wait();  // x and residual come from earlier kernels; h_out / normed_out may still be read by them
  const T* nw = static_cast<const T*>(p.norm_w);
  const float zc = p.zero_centered ? 1.f : 0.f;
  for (int t = 0; t < p.tokens; ++t) {
    const T* xt = static_cast<const T*>(p.x) + t * p.x_stride;
    const T* rt = static_cast<const T*>(p.residual) + t * p.res_stride;
    for (int c = threadIdx.x * 8; c < H; c += NT * 8) {
      Pack8<T> xv, rv;
      xv.load(xt + c);
      rv.load(rt + c);
      float a[8], b[8], hv[8];
      xv.get(a);
      rv.get(b);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const T s = from_float<T>(a[i] + b[i]);  // as fused_add_rms_norm_kernel: rounded to T
        hv[i] = to_float(s);
        if (blockIdx.x == 0) static_cast<T*>(p.h_out)[static_cast<size_t>(t) * H + c + i] = s;
      }
      *reinterpret_cast<float4*>(hs + c) = make_float4(hv[0], hv[1], hv[2], hv[3]);
      *reinterpret_cast<float4*>(hs + c + 4) = make_float4(hv[4], hv[5], hv[6], hv[7]);
    }
    __syncthreads();
    // the reference kernel's sum of squares: thread vt of B sums its elements vt + j B (j < kNormRegs, then
    // the rest), each warp of B threads reduces by warp_sum, then one warp_sum over the warp sums
    for (int vw = warp; vw < B / 32; vw += kMoeRouterWarps) {
      const int vt = vw * 32 + lane;
      float ss = 0.f;
#pragma unroll
      for (int j = 0; j < kNormRegsMoe; ++j) {
        const int i = vt + j * B;
        const float v = i < H ? hs[i] : 0.f;
        ss += v * v;
      }
      for (int i = vt + kNormRegsMoe * B; i < H; i += B) {
        const float v = hs[i];
        ss += v * v;
      }
      ss = warp_sum(ss);
      if (lane == 0) vsum[vw] = ss;
    }
    __syncthreads();
    float ss = lane < B / 32 ? vsum[lane] : 0.f;
    ss = warp_sum(ss);
    const float inv = rsqrtf(ss / static_cast<float>(H) + p.eps);
    for (int c = threadIdx.x * 8; c < H; c += NT * 8) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float wv = to_float(nw[c + i]) + zc;
        const T o = from_float<T>(hs[c + i] * inv * wv);
        hs[c + i] = to_float(o);
        if (blockIdx.x == 0) static_cast<T*>(p.normed_out)[static_cast<size_t>(t) * H + c + i] = o;
      }
    }
    __syncthreads();
    if (e < E) {  // the router dot (same order as moe_router_kernel)
      float acc = 0.f;
#pragma unroll
      for (int u = 0; u < RL; ++u) {
        const int c = lane * 8 + u * 256;
        if (c < H) {
          float a[8];
          w0[u].get(a);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc = fmaf(a[i], hs[c + i], acc);
        }
      }
      for (int base = 256 * RL; base < H; base += 256 * RL) {  // rows past 2048 (fp16)
        Pack8<T> wr[RL];
#pragma unroll
        for (int u = 0; u < RL; ++u) {
          const int c = base + lane * 8 + u * 256;
          if (c < H) wr[u].load(row + c);
        }
#pragma unroll
        for (int u = 0; u < RL; ++u) {
          const int c = base + lane * 8 + u * 256;
          if (c < H) {
            float a[8];
            wr[u].get(a);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc = fmaf(a[i], hs[c + i], acc);
          }
        }
      }
      acc = warp_sum(acc);
      if (lane == 0) static_cast<T*>(p.logits)[static_cast<size_t>(t) * E + e] = from_float<T>(acc);
    }
    __syncthreads();  // hs is rewritten for the next token
  }
}

}  // namespace revolta
