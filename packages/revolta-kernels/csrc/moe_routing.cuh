// The routing and the combination around a mixture-of-experts layer whose experts run elsewhere (the quantized
// experts: revolta::quant_moe_matmul), for few tokens, so such a decode step needs neither torch's top-k / sort
// kernels nor its chain of elementwise ops:
//   * moe_topk_softmax_kernel: one block per token, softmax top-k of its router logits (moe_route_block_cand:
//     ties go to the lower expert id), optionally renormalised; fp32 weights and int64 ids, as
//     revolta::moe_topk_softmax;
//   * moe_combine_kernel: out[t] = sum_k w16[t, k] * y[t, k] (each product rounded to the storage type, the sum in
//     fp32, as torch's (y * w.to(T)).float().sum(1).to(T)), plus, with a shared expert, sigmoid(x[t] . g) * s[t]
//     with the roundings of torch's fp16 ops (the gate logit, its sigmoid, the product, the sum). Each block
//     computes the gate's dot product itself (H <= a few thousand: cheaper than a launch).
// Both are plain launches: with PDL they measured no faster (Qwen3.5-35B-A3B AWQ batch 1 on an H100, 392.7 tok/s
// against 392.8 plain). They call pdl_trigger() early, so the
// PDL kernel after them (the experts' kernel, the next layer's projection) starts its prologue, and pdl_wait() (a
// no-op for a plain launch) before they read anything, which keeps pdl.cuh's contract if they are launched with PDL.
#pragma once

#include "moe_common.cuh"

namespace revolta {

constexpr int kMoeCombineThreads = 64;  // 8 elements each: 512 columns per block (4 blocks for H = 2048)

struct MoeCombineParams {
  const void* y;         // [T, K, H] (token stride y_stride; the K rows of a token contiguous)
  const float* weights;  // [T, K]
  const void* shared;    // [T, H] (token stride shared_stride) or null (then x and gate are unused)
  const void* x;         // [T, H] (token stride x_stride): the shared expert gate's input
  const void* gate;      // [H]: the shared expert gate's weight row
  void* out;             // [T, H]
  long long y_stride, shared_stride, x_stride;
  int T, K, H;
};

template <typename T>
__global__ void __launch_bounds__(kMoeWarps * 32) moe_topk_softmax_kernel(const T* logits, long long logits_stride,
                                                                          int E, int K, int renormalize,
                                                                          long long* ids_out, float* weights_out) {
  __shared__ float candv[kMoeMaxExperts];
  __shared__ int cand[kMoeMaxExperts];
  __shared__ float scratch[kMoeWarps];
  __shared__ int ids[kMoeMaxTopK];
  __shared__ float wts[kMoeMaxTopK];
  __shared__ int ncand;
  pdl_wait();  // the logits come from the kernel just before
  pdl_trigger();
  const int t = blockIdx.x;
  moe_route_block_cand<T>(logits + t * logits_stride, E, K, renormalize, scratch, ids, wts, cand, candv, &ncand, false);
  if (threadIdx.x < K) {
    ids_out[static_cast<size_t>(t) * K + threadIdx.x] = ids[threadIdx.x];
    weights_out[static_cast<size_t>(t) * K + threadIdx.x] = wts[threadIdx.x];
  }
}

template <typename T>
__global__ void __launch_bounds__(kMoeCombineThreads) moe_combine_kernel(const MoeCombineParams p) {
  __shared__ float scratch[kMoeCombineThreads / 32];
  pdl_wait();  // y comes from the kernel just before
  pdl_trigger();  // the next kernel's weight stream overlaps this one's loads
  const int t = blockIdx.y, tid = threadIdx.x;
  const int c0 = (blockIdx.x * kMoeCombineThreads + tid) * 8;  // this thread's 8 columns
  const bool mine = c0 < p.H;
  // Every row's loads first (at most kMoeMaxTopK + 1 in flight), so the block waits on one round trip, not K.
  Pack8<T> rows[kMoeMaxTopK];
  float w[kMoeMaxTopK];
#pragma unroll
  for (int k = 0; k < kMoeMaxTopK; ++k) {
    if (k < p.K) {
      w[k] = p.weights[static_cast<size_t>(t) * p.K + k];
      if (mine) rows[k].load(static_cast<const T*>(p.y) + t * p.y_stride + static_cast<size_t>(k) * p.H + c0);
    }
  }
  Pack8<T> sh;
  if (p.shared != nullptr && mine) sh.load(static_cast<const T*>(p.shared) + t * p.shared_stride + c0);
  float sg = 0.f;  // the shared expert's gate, sigmoid(x . g) rounded as torch's ops round it
  if (p.shared != nullptr) {  // each block computes the gate's dot product itself (cheaper than a launch)
    const T* xr = static_cast<const T*>(p.x) + t * p.x_stride;
    const T* g = static_cast<const T*>(p.gate);
    float dot = 0.f;
#pragma unroll 4
    for (int i = tid * 8; i < p.H; i += kMoeCombineThreads * 8) dot = dot8(xr + i, g + i, dot);
    dot = warp_sum(dot);
    if ((tid & 31) == 0) scratch[tid >> 5] = dot;
    __syncthreads();
    dot = 0.f;
#pragma unroll
    for (int i = 0; i < kMoeCombineThreads / 32; ++i) dot += scratch[i];
    const float logit = to_float(from_float<T>(dot));
    sg = to_float(from_float<T>(1.f / (1.f + expf(-logit))));
  }
  if (!mine) return;
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int k = 0; k < kMoeMaxTopK; ++k) {
    if (k < p.K) {
      const float wk = to_float(from_float<T>(w[k]));
      float f[8];
      rows[k].get(f);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] += to_float(from_float<T>(f[j] * wk));
    }
  }
  float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (p.shared != nullptr) sh.get(s);
  T* out = static_cast<T*>(p.out) + static_cast<size_t>(t) * p.H + c0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float o = to_float(from_float<T>(acc[j]));
    if (p.shared != nullptr) o = o + to_float(from_float<T>(sg * s[j]));
    out[j] = from_float<T>(o);
  }
}

}  // namespace revolta
