// Mixture-of-experts decode (moe.cuh), the up projection: act[t, k, j] = silu(x_t . w13[e_k, j]) * (x_t . w13[e_k,
// I + j]) for the K selected experts (plus the shared expert, and its gate logit), two (gate, up) row pairs per warp.
//   moe_up_kernel:       the routing comes precomputed (topk_ids).
//   moe_route_up_kernel: the routing runs here (softmax top-k of the router logits, moe_route_block_cand; blocks
//                        with only shared-expert items skip it), so the decode chain needs no routing launch.
// Both are launched with PDL (pdl.cuh): the shared expert's rows do not depend on the routing, so each warp's are
// prefetched into L2 before the wait (the router kernel's tail overlaps them).
#pragma once

#include "moe_common.cuh"

namespace revolta {

// 16-byte chunks of the token's activations each thread loads: H <= kMoeMaxSmemFloats
constexpr int kMoeUpXChunks = (kMoeMaxSmemFloats / 8 + kMoeWarps * 32 - 1) / (kMoeWarps * 32);

// The shared expert's gate and up rows of this warp's two items into L2 (items past the routed ones).
template <typename T>
__device__ __forceinline__ void moe_up_prefetch_shared(const MoeParams& p, int first, int routed) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int j = first + i - routed;
    if (j >= 0 && j < p.Is) {
      const T* w = static_cast<const T*>(p.shared_w13);
      moe_prefetch_row_l2(w + static_cast<size_t>(j) * p.H, static_cast<size_t>(p.H) * sizeof(T));
      moe_prefetch_row_l2(w + static_cast<size_t>(p.Is + j) * p.H, static_cast<size_t>(p.H) * sizeof(T));
    }
  }
}

// Token t's activations into registers, 16-byte loads all issued at once.
template <typename T>
__device__ __forceinline__ void moe_up_load_x(const MoeParams& p, int t, Pack8<T> (&xr)[kMoeUpXChunks]) {
  const T* x = static_cast<const T*>(p.x) + t * p.x_stride;
#pragma unroll
  for (int i = 0; i < kMoeUpXChunks; ++i) {
    const int c = (threadIdx.x + i * kMoeWarps * 32) * 8;
    if (c < p.H) xr[i].load(x + c);
  }
}

// The loaded activations as floats into shared memory (16-byte aligned).
template <typename T>
__device__ __forceinline__ void moe_up_stage_x(const Pack8<T> (&xr)[kMoeUpXChunks], float* xs, int H) {
#pragma unroll
  for (int i = 0; i < kMoeUpXChunks; ++i) {
    const int c = (threadIdx.x + i * kMoeWarps * 32) * 8;
    if (c < H) {
      float f[8];
      xr[i].get(f);
      *reinterpret_cast<float4*>(xs + c) = make_float4(f[0], f[1], f[2], f[3]);
      *reinterpret_cast<float4*>(xs + c + 4) = make_float4(f[4], f[5], f[6], f[7]);
    }
  }
}

// The weight rows of items first and first + 1: a routed (k, j) or shared j gives its gate and up rows, the gate item
// the shared gate's row (a null row gives 0).
template <typename T>
__device__ __forceinline__ void moe_up_rows(const MoeParams& p, const int* ids, int first, int routed, int total,
                                            int gate_item, const T* (&rows)[4]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int item = first + i;
    if (item < routed) {
      const int k = item / p.I, j = item % p.I;
      const T* w = static_cast<const T*>(p.w13) + static_cast<size_t>(ids[k]) * 2 * p.I * p.H;
      rows[2 * i] = w + static_cast<size_t>(j) * p.H;
      rows[2 * i + 1] = w + static_cast<size_t>(p.I + j) * p.H;
    } else if (item < total) {
      const int j = item - routed;
      const T* w = static_cast<const T*>(p.shared_w13);
      rows[2 * i] = w + static_cast<size_t>(j) * p.H;
      rows[2 * i + 1] = w + static_cast<size_t>(p.Is + j) * p.H;
    } else if (item == gate_item && p.shared_gate != nullptr) {
      rows[2 * i] = static_cast<const T*>(p.shared_gate);
    }
  }
}

// The two items' dot products and their results: silu(gate) * up into act, or the shared gate's sigmoid (1
// without a gate) into shared_scale.
template <typename T>
__device__ __forceinline__ void moe_up_items(const MoeParams& p, const T* const (&rows)[4], const float* xs, int t,
                                             int first, int total, int gate_item) {
  float acc[4];
  warp_dot_rows<T, 4, 2>(rows, xs, p.H, acc);
  if ((threadIdx.x & 31) == 0) {
    float* act = p.act + static_cast<size_t>(t) * total;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int item = first + i;
      if (item < total) {
        act[item] = moe_silu(acc[2 * i]) * acc[2 * i + 1];
      } else if (item == gate_item) {
        p.shared_scale[t] = p.shared_gate != nullptr ? 1.f / (1.f + expf(-acc[2 * i])) : 1.f;
      }
    }
  }
}

// grid (ceil(items / (2 * kMoeWarps)), T): items = K * I (+ Is) (+ 1 for the shared gate), two per warp.
// Dynamic smem: H floats (the token's activations, loaded with 16-byte loads all issued before the ids are read).
template <typename T>
__global__ void __launch_bounds__(kMoeWarps * 32) moe_up_kernel(MoeParams p) {
  extern __shared__ float4 xs4[];  // float4: 16-byte aligned for the vector reads
  float* xs = reinterpret_cast<float*>(xs4);
  __shared__ int ids[kMoeMaxTopK];
  const int t = blockIdx.y, warp = threadIdx.x >> 5;
  const int routed = p.K * p.I, total = routed + p.Is;
  const int gate_item = p.shared_w13 != nullptr ? total : -1;
  const int first = (blockIdx.x * kMoeWarps + warp) * 2;
  moe_up_prefetch_shared<T>(p, first, routed);
  pdl_wait();  // x and the routing come from earlier kernels
  pdl_trigger();
  Pack8<T> xr[kMoeUpXChunks];
  moe_up_load_x<T>(p, t, xr);
  if (threadIdx.x < p.K) ids[threadIdx.x] = static_cast<int>(p.topk_ids[t * p.K + threadIdx.x]);
  moe_up_stage_x<T>(xr, xs, p.H);
  __syncthreads();
  const T* rows[4] = {nullptr, nullptr, nullptr, nullptr};
  moe_up_rows<T>(p, ids, first, routed, total, gate_item, rows);
  if (first >= total + (gate_item >= 0 ? 1 : 0)) return;
  moe_up_items<T>(p, rows, xs, t, first, total, gate_item);
}

// blocks per SM moe_route_up_kernel is built for (fp16/bf16: 3, i.e. <= 85 registers, without spills; fp32's
// 32-byte packs need more registers: 2). With 3 the Qwen3.5-35B-A3B grid (289 blocks at batch 1) stays resident in
// one wave on an H100/H200 (at 87 registers it did not).
template <typename T> constexpr int kMoeRouteUpBlocksPerSm = sizeof(T) == 4 ? 2 : 3;

// grid (ceil(items / (2 * kMoeWarps)), T) as moe_up_kernel. Router logits required; writes the routing
// (topk_ids, topk_weights: block 0 of each token) for the down kernel.
template <typename T>
__global__ void __launch_bounds__(kMoeWarps * 32, kMoeRouteUpBlocksPerSm<T>) moe_route_up_kernel(MoeParams p) {
  extern __shared__ float4 xs4[];
  float* xs = reinterpret_cast<float*>(xs4);
  __shared__ int ids[kMoeMaxTopK];
  __shared__ float wts[kMoeMaxTopK];
  __shared__ float candv[2 * kMoeWarps * 32];
  __shared__ int cand[2 * kMoeWarps * 32];
  __shared__ float scratch[kMoeWarps];
  __shared__ int ncand;
  const int t = blockIdx.y, warp = threadIdx.x >> 5;
  const int routed = p.K * p.I, total = routed + p.Is;
  const int gate_item = p.shared_w13 != nullptr ? total : -1;
  const int items = total + (gate_item >= 0 ? 1 : 0);
  const bool route = blockIdx.x == 0 || static_cast<int>(blockIdx.x) * 2 * kMoeWarps < routed;
  const int first = (blockIdx.x * kMoeWarps + warp) * 2;
  moe_up_prefetch_shared<T>(p, first, routed);
  pdl_wait();  // x and the router logits come from earlier kernels
  pdl_trigger();
  Pack8<T> xr[kMoeUpXChunks];
  moe_up_load_x<T>(p, t, xr);
  if (route) {  // block-uniform
    moe_route_block_cand<T>(static_cast<const T*>(p.router_logits) + t * p.logits_stride, p.E, p.K, p.renormalize,
                            scratch, ids, wts, cand, candv, &ncand);
    if (blockIdx.x == 0 && threadIdx.x < p.K) {
      p.topk_ids[t * p.K + threadIdx.x] = ids[threadIdx.x];
      p.topk_weights[t * p.K + threadIdx.x] = wts[threadIdx.x];
    }
  }
  moe_up_stage_x<T>(xr, xs, p.H);
  __syncthreads();
  if (first < items) {
    const T* rows[4] = {nullptr, nullptr, nullptr, nullptr};
    moe_up_rows<T>(p, ids, first, routed, total, gate_item, rows);
    moe_up_items<T>(p, rows, xs, t, first, total, gate_item);
  }
}

}  // namespace revolta
