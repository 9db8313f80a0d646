// Mixture-of-experts for few tokens (decode): SwiGLU experts as GEMVs over only the selected experts' weights.
// Self-contained for NVRTC; fp16/bf16/fp32 storage, fp32 math, 16-byte weight loads, no tensor cores needed
// (a token's expert rows are read once; the work is memory-bound).
//
//   up:   act[t, k, j] = silu(x_t . w13[e_k, j]) * (x_t . w13[e_k, I + j])     (one warp per (k, j))
//   down: out[t, n]    = sum_k w_k * (w2[e_k, n] . act[t, k])                   (one warp per n)
// An optional shared expert (its own intermediate size Is) runs as one more expert with weight
// sigmoid(x_t . shared_gate) (or 1 without a gate). Routing (softmax over E router logits, top-k,
// optional renormalisation, weights rounded to the storage type as transformers does) can run inside the up
// kernel, each block redoing it for its token (E <= 512, k <= 16), or come precomputed.
#pragma once

#include "common.cuh"

namespace revolta {

constexpr int kMoeWarps = 8;
constexpr int kMoeMaxExperts = 512;
constexpr int kMoeMaxTopK = 16;
// dynamic shared memory of one block (x of the up kernel, activations of the down kernel): 47 KB, so static +
// dynamic stays under the 48 KB every arch allows without an opt-in
constexpr int kMoeMaxSmemFloats = 47 * 1024 / 4;

struct MoeParams {
  const void* x;  // [T, H] (row stride x_stride)
  const void* router_logits;  // [T, E] (row stride logits_stride), storage type; null: routing precomputed
  const void* w13;  // [E, 2I, H]
  const void* w2;  // [E, H, I]
  const void* shared_w13;  // [2Is, H] or null
  const void* shared_w2;  // [H, Is]
  const void* shared_gate;  // [H] or null
  int64_t* topk_ids;  // [T, K]: written when routing runs here, else read
  float* topk_weights;  // [T, K]
  float* act;  // [T, K * I + Is] scratch
  float* shared_scale;  // [T] scratch
  void* out;  // [T, H] contiguous
  long long x_stride, logits_stride;
  int T, H, E, I, K, Is, renormalize;
};

template <typename T> struct Pack8;  // 8 elements in 16 bytes (fp16/bf16) or 32 bytes (fp32)
template <> struct Pack8<__half> {
  uint4 u;
  __device__ __forceinline__ void load(const __half* p) { u = __ldg(reinterpret_cast<const uint4*>(p)); }
  __device__ __forceinline__ void get(float* o) const {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      o[2 * i] = f.x;
      o[2 * i + 1] = f.y;
    }
  }
};
template <> struct Pack8<__nv_bfloat16> {
  uint4 u;
  __device__ __forceinline__ void load(const __nv_bfloat16* p) { u = __ldg(reinterpret_cast<const uint4*>(p)); }
  __device__ __forceinline__ void get(float* o) const {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o[2 * i] = __uint_as_float(w[i] << 16);
      o[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
};
template <> struct Pack8<float> {
  float4 a, b;
  __device__ __forceinline__ void load(const float* p) {
    a = __ldg(reinterpret_cast<const float4*>(p));
    b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  }
  __device__ __forceinline__ void get(float* o) const {
    o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w; o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
  }
};

__device__ __forceinline__ float moe_silu(float x) { return x / (1.f + expf(-x)); }

// Dot products of ROWS weight rows (length L, L % 8 == 0) with a float vector in shared memory, by one warp with
// U 16-byte loads per row in flight; every lane gets the sums.
template <typename T, int ROWS, int U>
__device__ __forceinline__ void warp_dot_rows(const T* const (&rows)[ROWS], const float* vec, int L, float (&acc)[ROWS]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
  for (int base = lane * 8; base < L; base += 256 * U) {
    Pack8<T> w[ROWS][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (base + u * 256 < L) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) w[r][u].load(rows[r] + base + u * 256);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = base + u * 256;
      if (c < L) {
        const float4 v0 = *reinterpret_cast<const float4*>(vec + c);
        const float4 v1 = *reinterpret_cast<const float4*>(vec + c + 4);
        const float xv[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          float f[8];
          w[r][u].get(f);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[r] = fmaf(f[i], xv[i], acc[r]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = warp_sum(acc[r]);
}

// Softmax top-k of one token's router logits by one warp; results to shared memory (ids, weights).
template <typename T>
__device__ void moe_route_warp(const T* logits, int E, int K, int renormalize, int* ids, float* weights) {
  const int lane = threadIdx.x & 31;
  constexpr int PER = kMoeMaxExperts / 32;
  float p[PER];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < E ? to_float(logits[e]) : -INFINITY;
    mx = fmaxf(mx, p[i]);
  }
  mx = warp_max(mx);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < E ? expf(p[i] - mx) : 0.f;
    sum += p[i];
  }
  sum = warp_sum(sum);
  const float inv = 1.f / sum;
  unsigned taken = 0u;  // bit i: expert lane + 32 i already chosen
  float total = 0.f;
  for (int k = 0; k < K; ++k) {
    float best = -1.f;
    int bi = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = lane + 32 * i;
      const float v = p[i] * inv;
      if (e < E && !(taken >> i & 1u) && v > best) {
        best = v;
        bi = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {  // arg max; ties go to the lower expert id
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ob > best || (ob == best && oi < bi)) {
        best = ob;
        bi = oi;
      }
    }
    if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
    if (lane == 0) {
      ids[k] = bi;
      weights[k] = best;
    }
    total += best;
  }
  __syncwarp();
  if (lane < K) {
    float w = weights[lane];
    if (renormalize) w = w / total;
    weights[lane] = to_float(from_float<T>(w));  // the layer casts routing weights to the activations' dtype
  }
  __syncwarp();
}

template <typename T>
__device__ __forceinline__ void moe_load_x(const MoeParams& p, int t, float* xs) {
  const T* x = static_cast<const T*>(p.x) + t * p.x_stride;
  for (int i = threadIdx.x; i < p.H; i += blockDim.x) xs[i] = to_float(x[i]);
}

// grid (ceil(items / kMoeWarps), T); items = K * I (+ Is) (+ 1 for the shared gate). Dynamic smem: H floats.
template <typename T>
__global__ void __launch_bounds__(kMoeWarps * 32) moe_up_kernel(MoeParams p) {
  extern __shared__ float4 xs4[];  // float4: 16-byte aligned for the vector reads
  float* xs = reinterpret_cast<float*>(xs4);
  __shared__ int ids[kMoeMaxTopK];
  __shared__ float wts[kMoeMaxTopK];
  const int t = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  moe_load_x<T>(p, t, xs);
  if (p.router_logits != nullptr) {
    if (warp == 0) {
      moe_route_warp<T>(static_cast<const T*>(p.router_logits) + t * p.logits_stride, p.E, p.K, p.renormalize,
                        ids, wts);
      if (blockIdx.x == 0 && lane < p.K) {
        p.topk_ids[t * p.K + lane] = ids[lane];
        p.topk_weights[t * p.K + lane] = wts[lane];
      }
    }
  } else if (threadIdx.x < p.K) {
    ids[threadIdx.x] = static_cast<int>(p.topk_ids[t * p.K + threadIdx.x]);
  }
  __syncthreads();
  const int item = blockIdx.x * kMoeWarps + warp;
  const int routed = p.K * p.I, row_len = p.H;
  const T* rows[2];
  float acc[2];
  float* act = p.act + static_cast<size_t>(t) * (routed + p.Is);
  if (item < routed) {
    const int k = item / p.I, j = item % p.I;
    const T* w = static_cast<const T*>(p.w13) + static_cast<size_t>(ids[k]) * 2 * p.I * row_len;
    rows[0] = w + static_cast<size_t>(j) * row_len;
    rows[1] = w + static_cast<size_t>(p.I + j) * row_len;
  } else if (item < routed + p.Is) {
    const int j = item - routed;
    const T* w = static_cast<const T*>(p.shared_w13);
    rows[0] = w + static_cast<size_t>(j) * row_len;
    rows[1] = w + static_cast<size_t>(p.Is + j) * row_len;
  } else if (item == routed + p.Is && p.shared_w13 != nullptr) {
    if (p.shared_gate != nullptr) {
      const T* const one[1] = {static_cast<const T*>(p.shared_gate)};
      float g[1];
      warp_dot_rows<T, 1, 4>(one, xs, row_len, g);
      if (lane == 0) p.shared_scale[t] = 1.f / (1.f + expf(-g[0]));
    } else if (lane == 0) {
      p.shared_scale[t] = 1.f;
    }
    return;
  } else {
    return;
  }
  warp_dot_rows<T, 2, 4>(rows, xs, row_len, acc);
  if (lane == 0) act[item] = moe_silu(acc[0]) * acc[1];
}

// grid (ceil(H / kMoeWarps), T). Dynamic smem: K * I + Is floats (the token's activations).
template <typename T>
__global__ void __launch_bounds__(kMoeWarps * 32) moe_down_kernel(MoeParams p) {
  extern __shared__ float4 acts4[];
  float* acts = reinterpret_cast<float*>(acts4);
  __shared__ int ids[kMoeMaxTopK];
  __shared__ float wts[kMoeMaxTopK + 1];
  const int t = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int routed = p.K * p.I, total = routed + p.Is;
  const float* act = p.act + static_cast<size_t>(t) * total;
  for (int i = threadIdx.x; i < total; i += blockDim.x) acts[i] = act[i];
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
  constexpr int U = 8;
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
