// Mixture-of-experts decode (moe.cuh), v1: the up kernel (routing inside, two (gate, up) row pairs per warp) and
// the down kernel (one output row per warp). v1's down kernel is the default after v3's up kernel.
#pragma once

#include "moe_common.cuh"

namespace revolta {

// grid (ceil(items / (2 * kMoeWarps)), T): items = K * I (+ Is) (+ 1 for the shared gate), two per warp.
// Dynamic smem: H floats (the token's activations, loaded with 16-byte loads all issued before routing).
// PREFETCH: once the routing is known, each warp asks L2 for its whole rows (prefetch.global.L2, no registers)
// before its 16-byte register loads walk them, so all of a row's DRAM traffic is in flight from the start
// instead of one load round after another. Opt-in (REVOLTA_MOE_PREFETCH=1): on the H200 it measured slower.
template <typename T, bool PREFETCH = true>
__global__ void __launch_bounds__(kMoeWarps * 32) moe_up_kernel(MoeParams p) {
  extern __shared__ float4 xs4[];  // float4: 16-byte aligned for the vector reads
  float* xs = reinterpret_cast<float*>(xs4);
  __shared__ int ids[kMoeMaxTopK];
  __shared__ float wts[kMoeMaxTopK];
  __shared__ __align__(16) float lg[2 * kMoeWarps * 32 + 4];
  __shared__ float scratch[kMoeWarps];
  constexpr int kChunks = (kMoeMaxSmemFloats / 8 + kMoeWarps * 32 - 1) / (kMoeWarps * 32);
  const int t = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int routed = p.K * p.I, total = routed + p.Is;
  const int gate_item = p.shared_w13 != nullptr ? total : -1;
  const int first = (blockIdx.x * kMoeWarps + warp) * 2;
  // Launched with PDL where the library enables it (hybrid.cu): the shared expert's rows do not depend on the
  // routing, so this warp's are prefetched into L2 before the wait (the router kernel's tail overlaps them).
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
  if (threadIdx.x < 4) lg[2 * kMoeWarps * 32 + threadIdx.x] = -INFINITY;
  if (p.router_logits != nullptr) {
    moe_route_block<T>(static_cast<const T*>(p.router_logits) + t * p.logits_stride, p.E, p.K, p.renormalize, lg,
                       scratch, ids, wts);
    if (blockIdx.x == 0 && threadIdx.x < p.K) {
      p.topk_ids[t * p.K + threadIdx.x] = ids[threadIdx.x];
      p.topk_weights[t * p.K + threadIdx.x] = wts[threadIdx.x];
    }
  } else if (threadIdx.x < p.K) {
    ids[threadIdx.x] = static_cast<int>(p.topk_ids[t * p.K + threadIdx.x]);
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
  if (first >= total + (gate_item >= 0 ? 1 : 0)) return;
  if (PREFETCH) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      if (rows[r] != nullptr) moe_prefetch_row_l2(rows[r], static_cast<size_t>(p.H) * sizeof(T));
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

// grid (ceil(H / kMoeWarps), T). Dynamic smem: K * I + Is floats (the token's activations).
template <typename T, bool PREFETCH = true>
__global__ void __launch_bounds__(kMoeWarps * 32) moe_down_kernel(MoeParams p) {
  extern __shared__ float4 acts4[];
  float* acts = reinterpret_cast<float*>(acts4);
  __shared__ int ids[kMoeMaxTopK];
  __shared__ float wts[kMoeMaxTopK + 1];
  const int t = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int routed = p.K * p.I, total = routed + p.Is;
  // PDL (see moe_up_kernel): this warp's shared-expert row into L2 before the wait
  if (p.shared_w2 != nullptr && blockIdx.x * kMoeWarps + warp < p.H) {
    moe_prefetch_row_l2(static_cast<const T*>(p.shared_w2) + static_cast<size_t>(blockIdx.x * kMoeWarps + warp) * p.Is,
                        static_cast<size_t>(p.Is) * sizeof(T));
  }
  pdl_wait();  // activations, routing and the shared scale come from the up kernel
  pdl_trigger();
  if (PREFETCH && blockIdx.x * kMoeWarps + warp < p.H) {  // this warp's routed rows into L2 (see moe_up_kernel)
    const int n = blockIdx.x * kMoeWarps + warp;
    const int my_id = lane < p.K ? static_cast<int>(p.topk_ids[t * p.K + lane]) : 0;
    const int lines = static_cast<int>((static_cast<size_t>(p.I) * sizeof(T) + 127) / 128);
    for (int base = 0; base < p.K * lines; base += 32) {  // uniform trip count: the shuffle has every lane
      const int i = base + lane, k = min(i / lines, p.K - 1);
      const int e = __shfl_sync(0xffffffffu, my_id, k);
      if (i < p.K * lines) {
        moe_prefetch_l2(reinterpret_cast<const char*>(static_cast<const T*>(p.w2) +
                                                      (static_cast<size_t>(e) * p.H + n) * p.I) + (i - k * lines) * 128);
      }
    }
  }
  const float4* act = reinterpret_cast<const float4*>(p.act + static_cast<size_t>(t) * total);
  constexpr int kLoads = 6;  // float4 loads in flight per thread while staging the activations
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
  if (threadIdx.x < p.K) {
    ids[threadIdx.x] = static_cast<int>(p.topk_ids[t * p.K + threadIdx.x]);
    wts[threadIdx.x] = p.topk_weights[t * p.K + threadIdx.x];
  } else if (threadIdx.x == kMoeMaxTopK && p.shared_w2 != nullptr) {
    wts[kMoeMaxTopK] = p.shared_scale[t];
  }
  __syncthreads();
  const int n = blockIdx.x * kMoeWarps + warp;
  if (n >= p.H) return;
  // Flattened (expert, 256-column chunk) pieces of this row, 8 loads in flight per lane, one reduction at the end.
  const int chunks = (p.I + 255) / 256;
  const int pieces = p.K * chunks + (p.shared_w2 != nullptr ? (p.Is + 255) / 256 : 0);
  const T* w2 = static_cast<const T*>(p.w2);
  const T* sw2 = static_cast<const T*>(p.shared_w2);
  float sum = 0.f;
  constexpr int U = 9;
  for (int f0 = 0; f0 < pieces; f0 += U) {
    Pack8<T> w[U];
    int off[U];
    float scale[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int f = f0 + u;
      off[u] = -1;
      scale[u] = 0.f;
      if (f < pieces) {
        const T* row;
        int c, len;
        if (f < p.K * chunks) {
          const int k = f / chunks;
          c = (f - k * chunks) * 256 + lane * 8;
          len = p.I;
          row = w2 + (static_cast<size_t>(ids[k]) * p.H + n) * p.I;
          off[u] = k * p.I + c;
          scale[u] = wts[k];
        } else {
          c = (f - p.K * chunks) * 256 + lane * 8;
          len = p.Is;
          row = sw2 + static_cast<size_t>(n) * p.Is;
          off[u] = routed + c;
          scale[u] = wts[kMoeMaxTopK];
        }
        if (c < len) {
          w[u].load(row + c);
        } else {
          off[u] = -1;
        }
      }
    }
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
  if (lane == 0) static_cast<T*>(p.out)[static_cast<size_t>(t) * p.H + n] = from_float<T>(sum);
}

}  // namespace revolta
