// Mixture-of-experts decode (moe.cuh), v3: up3 and down3 (the default decode chain is router_norm, in
// moe_router_norm.cuh -> up3 -> v1's down).
#pragma once

#include "moe_router_norm.cuh"
#include "moe_v2.cuh"

namespace revolta {

// ------------------------------------------------------------------------------------------------ v3 kernels
// The default decode path (REVOLTA_MOE_V3=0 goes back to v1). Chain: moe_router_norm (batch 1; else the norm
// kernel and moe_router) -> up3 -> v1's down kernel (REVOLTA_MOE_DOWN=2/3: v2's / down3, both measured slower).
//   router_norm: the residual add + RMSNorm before the block fused into the router GEMV: every block computes
//           h = x + residual (rounded to T) and norm(h) for each token in shared memory with the exact
//           arithmetic and summation order of fused_add_rms_norm_kernel (norm.cuh, launched with
//           threads_for(H / 4) threads: `norm_threads` here), so h and the normed x are bit-identical to it;
//           block 0 writes them to new tensors (the expert kernels read the normed x, the next layer h).
//   up3:    v1's up kernel (two (gate, up) row pairs per warp, <= 85 registers: the whole grid resident), but
//           the rank count over candidates only (moe_route_block_cand) instead of v1's every-thread scan of all
//           E logits, no routing in shared-expert-only blocks, and optionally (PF_DOWN) an L2 prefetch of the
//           routed and shared down rows of this token, split over the grid, so the down kernel streams from L2:
//           PF_DOWN 1 = as soon as the routing is known, 2 = after this warp's dot products (both measured
//           slower on the H200; off by default).
// Prefetch into L2 the down rows token t will read (K routed experts' [H, I] blocks, then the shared expert's
// [H, Is] block), spread over `nthreads` threads (this one is `g`): one 128-byte line per step.
template <typename T>
__device__ __forceinline__ void moe_prefetch_down(const MoeParams& p, const int* ids, int g, int nthreads) {
  const size_t routed_lines = static_cast<size_t>(p.H) * p.I * sizeof(T) / 128;
  const size_t shared_lines = p.shared_w2 != nullptr ? static_cast<size_t>(p.H) * p.Is * sizeof(T) / 128 : 0;
  const size_t total = routed_lines * p.K + shared_lines;
  for (size_t L = g; L < total; L += nthreads) {
    const size_t k = L / routed_lines;
    const char* base = k < static_cast<size_t>(p.K)
                           ? reinterpret_cast<const char*>(static_cast<const T*>(p.w2) +
                                                           static_cast<size_t>(ids[k]) * p.H * p.I) +
                                 (L - k * routed_lines) * 128
                           : reinterpret_cast<const char*>(p.shared_w2) + (L - p.K * routed_lines) * 128;
    moe_prefetch_l2(base);
  }
}

// blocks per SM the v3 up/down kernels are built for (fp16/bf16: 3, i.e. <= 85 registers, without spills;
// fp32's 32-byte packs need more registers: 2)
template <typename T> constexpr int kMoe3BlocksPerSm = sizeof(T) == 4 ? 2 : 3;

// grid (ceil(items / (2 * kMoeWarps)), T) as moe_up_kernel. Router logits required (routing runs here, by
// moe_route_block_cand; blocks with only shared-expert items skip it). 3 blocks per SM (<= 85 registers): the
// Qwen3.5-35B-A3B grid (289 blocks at batch 1) stays resident in one wave (at 87 registers it did not).
template <typename T, int PF_DOWN>
__global__ void __launch_bounds__(kMoeWarps * 32, kMoe3BlocksPerSm<T>) moe_up3_kernel(MoeParams p) {
  extern __shared__ float4 xs4[];
  float* xs = reinterpret_cast<float*>(xs4);
  __shared__ int ids[kMoeMaxTopK];
  __shared__ float wts[kMoeMaxTopK];
  __shared__ float candv[2 * kMoeWarps * 32];
  __shared__ int cand[2 * kMoeWarps * 32];
  __shared__ float scratch[kMoeWarps];
  __shared__ int ncand;
  constexpr int kChunks = (kMoeMaxSmemFloats / 8 + kMoeWarps * 32 - 1) / (kMoeWarps * 32);
  const int t = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int routed = p.K * p.I, total = routed + p.Is;
  const int gate_item = p.shared_w13 != nullptr ? total : -1;
  const int items = total + (gate_item >= 0 ? 1 : 0);
  const bool route = blockIdx.x == 0 || static_cast<int>(blockIdx.x) * 2 * kMoeWarps < routed || PF_DOWN != 0;
  const int first = (blockIdx.x * kMoeWarps + warp) * 2;
  // the shared expert's rows do not depend on the routing: into L2 before the wait (see moe_up_kernel)
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int j = first + i - routed;
    if (j >= 0 && j < p.Is) {
      const T* w = static_cast<const T*>(p.shared_w13);
      moe_prefetch_row_l2(w + static_cast<size_t>(j) * p.H, static_cast<size_t>(p.H) * sizeof(T));
      moe_prefetch_row_l2(w + static_cast<size_t>(p.Is + j) * p.H, static_cast<size_t>(p.H) * sizeof(T));
    }
  }
  pdl_wait();  // x and the router logits come from earlier kernels
  pdl_trigger();
  const T* x = static_cast<const T*>(p.x) + t * p.x_stride;
  Pack8<T> xr[kChunks];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int c = (threadIdx.x + i * kMoeWarps * 32) * 8;
    if (c < p.H) xr[i].load(x + c);
  }
  if (route) {  // block-uniform
    moe_route_block_cand<T>(static_cast<const T*>(p.router_logits) + t * p.logits_stride, p.E, p.K, p.renormalize,
                            scratch, ids, wts, cand, candv, &ncand);
    if (blockIdx.x == 0 && threadIdx.x < p.K) {
      p.topk_ids[t * p.K + threadIdx.x] = ids[threadIdx.x];
      p.topk_weights[t * p.K + threadIdx.x] = wts[threadIdx.x];
    }
  }
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int c = (threadIdx.x + i * kMoeWarps * 32) * 8;
    if (c < p.H) {
      float f[8];
      xr[i].get(f);
      *reinterpret_cast<float4*>(xs + c) = make_float4(f[0], f[1], f[2], f[3]);
      *reinterpret_cast<float4*>(xs + c + 4) = make_float4(f[4], f[5], f[6], f[7]);
    }
  }
  __syncthreads();
  if (PF_DOWN == 1) moe_prefetch_down<T>(p, ids, blockIdx.x * kMoeWarps * 32 + threadIdx.x, gridDim.x * kMoeWarps * 32);
  if (first < items) {
    const T* rows[4] = {nullptr, nullptr, nullptr, nullptr};
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
    float acc[4];
    warp_dot_rows<T, 4, 2>(rows, xs, p.H, acc);
    if (lane == 0) {
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
  if (PF_DOWN == 2) {
    moe_prefetch_down<T>(p, ids, blockIdx.x * kMoeWarps * 32 + threadIdx.x, gridDim.x * kMoeWarps * 32);
  }
}

// Opt-in (REVOLTA_MOE_DOWN=3): measured slower than v1's down kernel on the H200 (chain at batch 1: 33.8 us
// against 30.1 with up3; benchmarks/results/moe/run2), although it starts its DRAM stream one L2 round earlier.
// grid (ceil(H / kMoeWarps), T), dynamic smem K * I + Is floats: v1's down kernel (one output row per warp,
// (expert, 256-column chunk) pieces 9 loads in flight, the same summation order, so bit-identical output), but
// each warp reads the routing itself right after the wait and issues its first round of weight loads before
// the activations are staged (v1 stages first: one more L2 round trip before the first DRAM request), and at
// most 85 registers (3 blocks per SM: the whole grid resident).
template <typename T>
__global__ void __launch_bounds__(kMoeWarps * 32, kMoe3BlocksPerSm<T>) moe_down3_kernel(MoeParams p) {
  extern __shared__ float4 acts4[];
  float* acts = reinterpret_cast<float*>(acts4);
  const int t = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int routed = p.K * p.I, total = routed + p.Is;
  const int n = blockIdx.x * kMoeWarps + warp;
  const bool row_ok = n < p.H;  // warp-uniform
  const T* w2 = static_cast<const T*>(p.w2);
  const T* sw2 = static_cast<const T*>(p.shared_w2);
  const int chunks = (p.I + 255) / 256;
  const int rpieces = p.K * chunks;
  const int pieces = rpieces + (sw2 != nullptr ? (p.Is + 255) / 256 : 0);
  if (sw2 != nullptr && row_ok) {  // the shared expert's row into L2 before the wait (as moe_down_kernel)
    moe_prefetch_row_l2(sw2 + static_cast<size_t>(n) * p.Is, static_cast<size_t>(p.Is) * sizeof(T));
  }
  pdl_wait();  // activations, routing and the shared scale come from the up kernel
  pdl_trigger();
  const int my_id = lane < p.K ? static_cast<int>(p.topk_ids[t * p.K + lane]) : 0;
  const float my_w = lane < p.K ? p.topk_weights[t * p.K + lane] : 0.f;
  const float sscale = sw2 != nullptr ? p.shared_scale[t] : 0.f;
  constexpr int U = 9;
  Pack8<T> w[U];
  int off[U];
  float scale[U];
  auto issue = [&](int f0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int f = f0 + u;
      off[u] = -1;
      scale[u] = 0.f;
      if (f < pieces) {  // warp-uniform: the shuffles see every lane
        const T* row;
        int c, len, o;
        float sc;
        if (f < rpieces) {
          const int k = f / chunks;
          const int e = __shfl_sync(0xffffffffu, my_id, k);
          sc = __shfl_sync(0xffffffffu, my_w, k);
          c = (f - k * chunks) * 256 + lane * 8;
          len = p.I;
          row = w2 + (static_cast<size_t>(e) * p.H + (row_ok ? n : 0)) * p.I;
          o = k * p.I + c;
        } else {
          c = (f - rpieces) * 256 + lane * 8;
          len = p.Is;
          row = sw2 + static_cast<size_t>(row_ok ? n : 0) * p.Is;
          o = routed + c;
          sc = sscale;
        }
        if (row_ok && c < len) {
          w[u].load(row + c);
          off[u] = o;
          scale[u] = sc;
        }
      }
    }
  };
  issue(0);  // in flight while the activations are staged
  const float4* act = reinterpret_cast<const float4*>(p.act + static_cast<size_t>(t) * total);
  constexpr int kLoads = 2;  // fewer than v1: the first weight loads hold registers meanwhile
  for (int base = threadIdx.x; base < total / 4; base += kLoads * kMoeWarps * 32) {
    float4 r[kLoads];
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int at = base + i * kMoeWarps * 32;
      if (at < total / 4) r[i] = act[at];
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int at = base + i * kMoeWarps * 32;
      if (at < total / 4) acts4[at] = r[i];
    }
  }
  __syncthreads();
  float sum = 0.f;
  for (int f0 = 0; f0 < pieces; f0 += U) {
    if (f0 > 0) issue(f0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (off[u] >= 0) {
        float f[8];
        w[u].get(f);
        const float4 a0 = *reinterpret_cast<const float4*>(acts + off[u]);
        const float4 a1 = *reinterpret_cast<const float4*>(acts + off[u] + 4);
        const float d = f[0] * a0.x + f[1] * a0.y + f[2] * a0.z + f[3] * a0.w + f[4] * a1.x + f[5] * a1.y +
                        f[6] * a1.z + f[7] * a1.w;
        sum = fmaf(scale[u], d, sum);
      }
    }
  }
  sum = warp_sum(sum);
  if (lane == 0 && row_ok) static_cast<T*>(p.out)[static_cast<size_t>(t) * p.H + n] = from_float<T>(sum);
}

}  // namespace revolta
