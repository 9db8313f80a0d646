// Mixture-of-experts for few tokens (decode): SwiGLU experts as GEMVs over only the selected experts' weights.
// Self-contained for NVRTC; fp16/bf16/fp32 storage, fp32 math, 16-byte weight loads, no tensor cores needed
// (a token's expert rows are read once; the work is memory-bound).
//
//   up:   act[t, k, j] = silu(x_t . w13[e_k, j]) * (x_t . w13[e_k, I + j])     (two (k, j) per warp)
//   down: out[t, n]    = sum_k w_k * (w2[e_k, n] . act[t, k])                   (one warp per n)
// An optional shared expert (its own intermediate size Is) runs as one more expert with weight
// sigmoid(x_t . shared_gate) (or 1 without a gate). Routing (softmax over E router logits, top-k,
// optional renormalisation, weights rounded to the storage type as transformers does) can run inside the up
// kernel, each block redoing it for its token (E <= 512, k <= 16), or come precomputed.
#pragma once

#include "common.cuh"
#include "pdl.cuh"

namespace revolta {

constexpr int kMoeWarps = 8;
constexpr int kMoeMaxExperts = 2 * kMoeWarps * 32;  // two per thread of the routing block
constexpr int kMoeMaxTopK = 16;
// dynamic shared memory of one block (x of the up kernel, activations of the down kernel): 45 KB, so static +
// dynamic stays under the 48 KB every arch allows without an opt-in
constexpr int kMoeMaxSmemFloats = 45 * 1024 / 4;

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

__device__ __forceinline__ void moe_prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}

// One warp prefetches a row of `bytes` bytes into L2 (a 128-byte line per lane and step).
__device__ __forceinline__ void moe_prefetch_row_l2(const void* row, size_t bytes) {
  for (size_t off = (threadIdx.x & 31) * 128; off < bytes; off += 32 * 128) {
    moe_prefetch_l2(static_cast<const char*>(row) + off);
  }
}

__device__ __forceinline__ float moe_silu(float x) { return x / (1.f + expf(-x)); }

// Dot products of ROWS weight rows (length L, L % 8 == 0; a null row gives 0) with a float vector in shared
// memory, by one warp with U 16-byte loads per row in flight; every lane gets the sums.
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
        for (int r = 0; r < ROWS; ++r) {
          if (rows[r] != nullptr) w[r][u].load(rows[r] + base + u * 256);
        }
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
          if (rows[r] != nullptr) {
            float f[8];
            w[r][u].get(f);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[r] = fmaf(f[i], xv[i], acc[r]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = warp_sum(acc[r]);
}

// Block-wide reduction (max or sum) of one value per thread; `scratch` holds kMoeWarps floats. All get it.
template <bool MAX>
__device__ __forceinline__ float moe_block_reduce(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = MAX ? warp_max(v) : warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = scratch[0];
#pragma unroll
  for (int w = 1; w < kMoeWarps; ++w) r = MAX ? fmaxf(r, scratch[w]) : r + scratch[w];
  return r;
}

// Softmax top-k of one token's router logits by the whole block (E <= 2 * blockDim.x): each expert's rank is
// the number of experts with a larger logit (ties: the lower id ranks first); ranks < K are the choice.
// Weights as transformers computes them: softmax probabilities, optionally renormalised over the K, then
// rounded to the storage type. Results in shared memory (ids, wts).
template <typename T>
__device__ void moe_route_block(const T* logits, int E, int K, int renormalize, float* lg, float* scratch, int* ids,
                                float* wts) {
  const int tid = threadIdx.x, lane = tid & 31;
  const int e0 = tid, e1 = tid + kMoeWarps * 32;
  const float v0 = e0 < E ? to_float(logits[e0]) : -INFINITY;
  const float v1 = e1 < E ? to_float(logits[e1]) : -INFINITY;
  lg[e0] = v0;
  lg[e1] = v1;
  const float mx = moe_block_reduce<true>(fmaxf(v0, v1), scratch);
  const float sum = moe_block_reduce<false>(expf(v0 - mx) + expf(v1 - mx), scratch);  // barriers: lg visible
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int e = i == 0 ? e0 : e1;
    const float v = i == 0 ? v0 : v1;
    if (e < E) {
      int rank = 0;
      for (int j = 0; j < E; j += 4) {  // E % 4 == 0 is not required: lg past E holds -inf
        const float4 l = *reinterpret_cast<const float4*>(lg + j);
        rank += (l.x > v || (l.x == v && j < e)) + (l.y > v || (l.y == v && j + 1 < e)) +
                (l.z > v || (l.z == v && j + 2 < e)) + (l.w > v || (l.w == v && j + 3 < e));
      }
      if (rank < K) {
        ids[rank] = e;
        wts[rank] = expf(v - mx) / sum;
      }
    }
  }
  __syncthreads();
  if (tid < 32) {
    float w = lane < K ? wts[lane] : 0.f;
    const float total = warp_sum(w);
    if (lane < K) wts[lane] = to_float(from_float<T>(renormalize ? w / total : w));
  }
  __syncthreads();
}

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

// ------------------------------------------------------------------------------------------------ v2 kernels
// Opt-in with REVOLTA_MOE_V2=1 (v1 above stays the default: on the H200 the v2 up/down pair measured slower,
// 40.2 us against 29.7 us for the Qwen3.5-35B-A3B block at batch 1; the router kernel is used either way,
// 2.9 us alone and ~0.3 us on top of the block when chained with PDL). Launched with programmatic
// dependent launch (pdl.cuh) as a chain router -> up -> down, each kernel loading the weights it can name before
// its pdl_wait() (router rows into registers; the shared expert's rows into L2), so those streams overlap the
// previous kernel's tail:
//   router: logits[t, e] = x_t . wr[e] (storage type, fp32 accumulation), one warp per expert row, the row
//           held in registers across tokens.
//   up2:    routing by one warp (softmax, top-k by K rounds of warp argmax: the same choice and weights as
//           moe_route_block), then one (expert, j) item per warp with all 2 * H / 256 16-byte loads of its gate
//           and up rows in flight at once (H <= 256 * kMoeUpLoads per trip).
//   down2:  one output row per warp, the top-k ids read first and every routed row's loads issued before the
//           activations are staged in shared memory.
constexpr int kMoeRouterWarps = 4;
constexpr int kMoeRouterLoads = 8;  // 16-byte loads per lane held across the wait: rows of H <= 2048 in one go
constexpr int kMoeUpLoads = 8;  // per row and lane: two rows -> 16 loads in flight (fp16/bf16; half for fp32)
constexpr int kMoeDownLoads = 16;
// Pack8 loads of 16 bytes worth n per lane: fp32 packs are 32 bytes, so half as many keep registers in bounds
template <typename T> struct MoeLoads {
  static constexpr int up = kMoeUpLoads, down = kMoeDownLoads, router = kMoeRouterLoads;
};
template <> struct MoeLoads<float> {
  static constexpr int up = kMoeUpLoads / 2, down = kMoeDownLoads / 2, router = kMoeRouterLoads / 2;
};

// grid (ceil(E / kMoeRouterWarps)), block kMoeRouterWarps * 32. logits [T, E] contiguous.
template <typename T>
__global__ void __launch_bounds__(kMoeRouterWarps * 32) moe_router_kernel(const T* __restrict__ x, long long x_stride,
                                                                          const T* __restrict__ w,
                                                                          T* __restrict__ logits, int tokens, int H,
                                                                          int E) {
  constexpr int RL = MoeLoads<T>::router;
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

// Softmax top-k of one token's router logits by one warp (E <= 32 * 16): the K largest logits (ties: lower id
// first) in rank order, weights as moe_route_block computes them. Results in shared memory (ids, wts).
template <typename T>
__device__ __forceinline__ void moe_route_warp(const T* logits, int E, int K, int renormalize, int* ids, float* wts) {
  constexpr int kPer = kMoeMaxExperts / 32;
  const int lane = threadIdx.x & 31;
  float v[kPer];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int e = lane + 32 * j;
    v[j] = e < E ? to_float(logits[e]) : -INFINITY;
    mx = fmaxf(mx, v[j]);
  }
  mx = warp_max(mx);
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) sum += lane + 32 * j < E ? expf(v[j] - mx) : 0.f;
  sum = warp_sum(sum);
  unsigned taken = 0u;  // bit j: this lane's expert lane + 32 j is chosen
  float mine = 0.f;  // probability of the expert this lane picked in round `lane`
  for (int r = 0; r < K; ++r) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int e = lane + 32 * j;
      if (e < E && !(taken >> j & 1u) && (v[j] > bv || bi == 0x7fffffff)) {
        bv = v[j];
        bi = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
    if (lane == r) {
      ids[r] = bi;
      mine = expf(bv - mx) / sum;
    }
  }
  const float total = warp_sum(lane < K ? mine : 0.f);
  if (lane < K) wts[lane] = to_float(from_float<T>(renormalize ? mine / total : mine));
}

// grid (min(ceil(items / kMoeWarps), resident blocks), T): items = K * I (+ Is) (+ 1 for the shared gate);
// each warp walks items blockIdx.x * kMoeWarps + warp + i * gridDim.x * kMoeWarps, so one resident wave routes
// once per block and streams the rest. Dynamic smem: H floats (the token's activations). Router logits are
// required (routing runs here).
template <typename T>
__global__ void __launch_bounds__(kMoeWarps * 32) moe_up2_kernel(MoeParams p) {
  constexpr int UL = MoeLoads<T>::up;
  extern __shared__ float4 xs4[];
  float* xs = reinterpret_cast<float*>(xs4);
  __shared__ int ids[kMoeMaxTopK];
  __shared__ float wts[kMoeMaxTopK];
  const int t = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int routed = p.K * p.I, total = routed + p.Is;
  const int gate_item = p.shared_w13 != nullptr ? total : -1;
  const int items = total + (gate_item >= 0 ? 1 : 0);
  const int stride = gridDim.x * kMoeWarps;
  // rows of an item: (gate, up) of a routed or the shared expert, or the shared gate alone (second null)
  auto rows_of = [&](int item, const T*& r0, const T*& r1) {
    r0 = r1 = nullptr;
    if (item < routed) {
      const int k = item / p.I, j = item % p.I;
      const T* w = static_cast<const T*>(p.w13) + static_cast<size_t>(ids[k]) * 2 * p.I * p.H;
      r0 = w + static_cast<size_t>(j) * p.H;
      r1 = w + static_cast<size_t>(p.I + j) * p.H;
    } else if (item < total) {
      const T* w = static_cast<const T*>(p.shared_w13);
      r0 = w + static_cast<size_t>(item - routed) * p.H;
      r1 = w + static_cast<size_t>(p.Is + item - routed) * p.H;
    } else if (item == gate_item) {
      r0 = static_cast<const T*>(p.shared_gate);
    }
  };
  // The shared expert's rows are known before routing: pull them into L2 while the router finishes.
  if (t == 0) {
    for (int item = blockIdx.x * kMoeWarps + warp; item < items; item += stride) {
      if (item < routed) continue;
      const T* r0;
      const T* r1;
      rows_of(item, r0, r1);
      for (int c = lane * 64 / static_cast<int>(sizeof(T)); r0 != nullptr && c < p.H;
           c += 32 * 64 / static_cast<int>(sizeof(T))) {
        moe_prefetch_l2(r0 + c);
        if (r1 != nullptr) moe_prefetch_l2(r1 + c);
      }
    }
  }
  pdl_wait();
  const T* x = static_cast<const T*>(p.x) + t * p.x_stride;
  constexpr int kChunks = (kMoeMaxSmemFloats / 8 + kMoeWarps * 32 - 1) / (kMoeWarps * 32);
  Pack8<T> xr[kChunks];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int c = (threadIdx.x + i * kMoeWarps * 32) * 8;
    if (c < p.H) xr[i].load(x + c);
  }
  if (warp == 0) {
    moe_route_warp<T>(static_cast<const T*>(p.router_logits) + t * p.logits_stride, p.E, p.K, p.renormalize, ids,
                      wts);
    if (blockIdx.x == 0 && lane < p.K) {
      p.topk_ids[t * p.K + lane] = ids[lane];
      p.topk_weights[t * p.K + lane] = wts[lane];
    }
  }
  __syncthreads();
  int item = blockIdx.x * kMoeWarps + warp;
  const T* rows[2];
  Pack8<T> wv[2][UL];
  auto issue = [&](int base) {  // the loads of columns [base, base + 256 * UL) of the current rows
#pragma unroll
    for (int u = 0; u < UL; ++u) {
      const int c = base + lane * 8 + u * 256;
      if (c < p.H) {
        if (rows[0] != nullptr) wv[0][u].load(rows[0] + c);
        if (rows[1] != nullptr) wv[1][u].load(rows[1] + c);
      }
    }
  };
  rows_of(item, rows[0], rows[1]);
  issue(0);  // the first item's loads fly while x is staged
  pdl_trigger();
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
  while (item < items) {
    float acc0 = 0.f, acc1 = 0.f;
    if (rows[0] != nullptr) {
      for (int base = 0; base < p.H; base += 256 * UL) {
        if (base > 0) issue(base);
#pragma unroll
        for (int u = 0; u < UL; ++u) {
          const int c = base + lane * 8 + u * 256;
          if (c < p.H) {
            const float4 v0 = *reinterpret_cast<const float4*>(xs + c);
            const float4 v1 = *reinterpret_cast<const float4*>(xs + c + 4);
            const float xv[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
            float f[8];
            wv[0][u].get(f);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc0 = fmaf(f[i], xv[i], acc0);
            if (rows[1] != nullptr) {
              wv[1][u].get(f);
#pragma unroll
              for (int i = 0; i < 8; ++i) acc1 = fmaf(f[i], xv[i], acc1);
            }
          }
        }
      }
      acc0 = warp_sum(acc0);
      acc1 = warp_sum(acc1);
    }
    if (lane == 0) {
      if (item < total) {
        p.act[static_cast<size_t>(t) * total + item] = moe_silu(acc0) * acc1;
      } else {  // the shared gate (1 without one: a shared expert that is not gated)
        p.shared_scale[t] = rows[0] != nullptr ? 1.f / (1.f + expf(-acc0)) : 1.f;
      }
    }
    item += stride;
    if (item < items) {
      rows_of(item, rows[0], rows[1]);
      issue(0);
    }
  }
}

// grid (ceil(H / kMoeWarps), T). Dynamic smem: K * I + Is floats (the token's activations).
template <typename T>
__global__ void __launch_bounds__(kMoeWarps * 32) moe_down2_kernel(MoeParams p) {
  constexpr int DL = MoeLoads<T>::down;
  extern __shared__ float4 acts4[];
  float* acts = reinterpret_cast<float*>(acts4);
  const int t = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int routed = p.K * p.I, total = routed + p.Is;
  const int n = blockIdx.x * kMoeWarps + warp;
  const int chunks = (p.I + 255) / 256;
  const int rpieces = p.K * chunks;
  const int pieces = rpieces + (p.shared_w2 != nullptr ? (p.Is + 255) / 256 : 0);
  const T* w2 = static_cast<const T*>(p.w2);
  const T* sw2 = static_cast<const T*>(p.shared_w2);
  if (t == 0 && n < p.H && sw2 != nullptr) {  // the shared expert's row: into L2 before the wait
    const T* row = sw2 + static_cast<size_t>(n) * p.Is;
    for (int c = lane * 64 / static_cast<int>(sizeof(T)); c < p.Is; c += 32 * 64 / static_cast<int>(sizeof(T)))
      moe_prefetch_l2(row + c);
  }
  pdl_wait();
  // this lane's view of the routing: ids[k] in lane k (read once, shuffled where needed)
  const int my_id = lane < p.K ? static_cast<int>(p.topk_ids[t * p.K + lane]) : 0;
  const float my_w = lane < p.K ? p.topk_weights[t * p.K + lane] : 0.f;
  const float sscale = sw2 != nullptr ? p.shared_scale[t] : 0.f;
  // piece f -> (row pointer, column, length, activation offset, scale)
  auto piece = [&](int f, const T*& row, int& c, int& len, int& off, float& scale) {
    if (f < rpieces) {
      const int k = f / chunks;
      const int e = __shfl_sync(0xffffffffu, my_id, k);
      scale = __shfl_sync(0xffffffffu, my_w, k);
      c = (f - k * chunks) * 256 + lane * 8;
      len = p.I;
      row = w2 + (static_cast<size_t>(e) * p.H + (n < p.H ? n : 0)) * p.I;
      off = k * p.I + c;
    } else {
      c = (f - rpieces) * 256 + lane * 8;
      len = p.Is;
      row = sw2 + static_cast<size_t>(n < p.H ? n : 0) * p.Is;
      off = routed + c;
      scale = sscale;
    }
  };
  Pack8<T> w[DL];
#pragma unroll
  for (int u = 0; u < DL; ++u) {  // first batch of weight loads, in flight while acts are staged
    const T* row;
    int c, len, off;
    float scale;
    if (u < pieces) {
      piece(u, row, c, len, off, scale);
      if (n < p.H && c < len) w[u].load(row + c);
    }
  }
  pdl_trigger();
  const float4* act = reinterpret_cast<const float4*>(p.act + static_cast<size_t>(t) * total);
#pragma unroll 4
  for (int i = threadIdx.x; i < total / 4; i += kMoeWarps * 32) acts4[i] = act[i];
  __syncthreads();
  if (n >= p.H) return;
  float sum = 0.f;
  for (int f0 = 0; f0 < pieces; f0 += DL) {
    if (f0 > 0) {
#pragma unroll
      for (int u = 0; u < DL; ++u) {
        const T* row;
        int c, len, off;
        float scale;
        if (f0 + u < pieces) {
          piece(f0 + u, row, c, len, off, scale);
          if (c < len) w[u].load(row + c);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < DL; ++u) {
      const T* row;
      int c, len, off;
      float scale;
      if (f0 + u < pieces) {
        piece(f0 + u, row, c, len, off, scale);
        if (c < len) {
          float f[8];
          w[u].get(f);
          const float4 a0 = *reinterpret_cast<const float4*>(acts + off);
          const float4 a1 = *reinterpret_cast<const float4*>(acts + off + 4);
          const float d = f[0] * a0.x + f[1] * a0.y + f[2] * a0.z + f[3] * a0.w + f[4] * a1.x + f[5] * a1.y +
                          f[6] * a1.z + f[7] * a1.w;
          sum = fmaf(scale, d, sum);
        }
      }
    }
  }
  sum = warp_sum(sum);
  if (lane == 0) static_cast<T*>(p.out)[static_cast<size_t>(t) * p.H + n] = from_float<T>(sum);
}

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

// grid (ceil(E / kMoeRouterWarps)), block kMoeRouterWarps * 32, dynamic smem H floats. x, residual, norm_w
// rows 16-byte aligned, H % 8 == 0, norm_threads a power of two in [32, 1024].
template <typename T>
__global__ void __launch_bounds__(kMoeRouterWarps * 32) moe_router_norm_kernel(MoeRouterNormParams p) {
  constexpr int RL = MoeLoads<T>::router;
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

// moe_route_block with the same choice and weights (bit for bit), but the rank count over candidates only: the
// kMoeWarps warp maxima are distinct experts, so when K <= kMoeWarps the K-th largest logit is >= their
// minimum tau and only experts with a logit >= tau can be chosen; an expert's rank only counts experts that beat
// it, which are candidates too. So each candidate is ranked against the candidates (typically ~10-30 of E)
// instead of every thread scanning all E logits (v1: ~1.3K instructions per thread before any row load).
// `cand` holds E ints, `candv` E floats, `ncand` one int (shared memory).
template <typename T>
__device__ void moe_route_block_cand(const T* logits, int E, int K, int renormalize, float* scratch, int* ids,
                                     float* wts, int* cand, float* candv, int* ncand) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int e0 = tid, e1 = tid + kMoeWarps * 32;
  const float v0 = e0 < E ? to_float(logits[e0]) : -INFINITY;
  const float v1 = e1 < E ? to_float(logits[e1]) : -INFINITY;
  if (tid == 0) *ncand = 0;
  if (tid < K) ids[tid] = 0;  // in range whatever the logits (NaN)
  const float wm = warp_max(fmaxf(v0, v1));
  __syncthreads();
  if (lane == 0) scratch[warp] = wm;
  __syncthreads();
  float mx = scratch[0], tau = scratch[0];
#pragma unroll
  for (int w = 1; w < kMoeWarps; ++w) {
    mx = fmaxf(mx, scratch[w]);
    tau = fminf(tau, scratch[w]);
  }
  if (K > kMoeWarps) tau = -INFINITY;
  const float sum = moe_block_reduce<false>(expf(v0 - mx) + expf(v1 - mx), scratch);  // barriers: ncand = 0 seen
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int e = i == 0 ? e0 : e1;
    const float v = i == 0 ? v0 : v1;
    if (e < E && v >= tau) {
      const int slot = atomicAdd(ncand, 1);
      cand[slot] = e;
      candv[slot] = v;
    }
  }
  __syncthreads();
  const int C = *ncand;
  for (int c = tid; c < C; c += kMoeWarps * 32) {
    const int e = cand[c];
    const float v = candv[c];
    int rank = 0;
#pragma unroll 4
    for (int j = 0; j < C; ++j) {
      const float l = candv[j];
      rank += (l > v || (l == v && cand[j] < e));
    }
    if (rank < K) {
      ids[rank] = e;
      wts[rank] = expf(v - mx) / sum;
    }
  }
  __syncthreads();
  if (tid < 32) {
    float w = lane < K ? wts[lane] : 0.f;
    const float total = warp_sum(w);
    if (lane < K) wts[lane] = to_float(from_float<T>(renormalize ? w / total : w));
  }
  __syncthreads();
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
