// Mixture-of-experts decode (moe.cuh), the down projection and weighted sum:
//   out[t, n] = sum_k w_k * (w2[e_k, n] . act[t, k]) (+ shared_scale[t] * (shared_w2[n] . act[t, shared]))
// one warp per output row n, over the routing the up kernel wrote. Launched with PDL (pdl.cuh).
#pragma once

#include "moe_common.cuh"

namespace revolta {

// grid (ceil(H / kMoeWarps), T). Dynamic smem: K * I + Is floats (the token's activations).
template <typename T>
__global__ void __launch_bounds__(kMoeWarps * 32) moe_down_kernel(MoeParams p) {
  extern __shared__ float4 acts4[];
  float* acts = reinterpret_cast<float*>(acts4);
  __shared__ int ids[kMoeMaxTopK];
  __shared__ float wts[kMoeMaxTopK + 1];
  const int t = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int routed = p.K * p.I, total = routed + p.Is;
  // PDL (see moe_decode_up.cuh): this warp's shared-expert row into L2 before the wait
  if (p.shared_w2 != nullptr && blockIdx.x * kMoeWarps + warp < p.H) {
    moe_prefetch_row_l2(static_cast<const T*>(p.shared_w2) + static_cast<size_t>(blockIdx.x * kMoeWarps + warp) * p.Is,
                        static_cast<size_t>(p.Is) * sizeof(T));
  }
  pdl_wait();  // activations, routing and the shared scale come from the up kernel
  pdl_trigger();
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
