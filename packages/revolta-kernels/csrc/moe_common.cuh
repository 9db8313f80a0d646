// Mixture-of-experts for few tokens (moe.cuh): the shared parameters, 8-element packs, warp dot products, the block
// sum and the softmax top-k routing every MoE kernel uses.
#pragma once

#include "common.cuh"
#include "cuda_compat.cuh"
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
  __device__ __forceinline__ void get(float* o) const { half8_to_float(u, o); }
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

// dot + a[0 .. 8) . b[0 .. 8) in fp32, from two 8-element loads.
template <typename T>
__device__ __forceinline__ float dot8(const T* a, const T* b, float dot) {
  Pack8<T> pa, pb;
  pa.load(a);
  pb.load(b);
  float fa[8], fb[8];
  pa.get(fa);
  pb.get(fb);
#pragma unroll
  for (int j = 0; j < 8; ++j) dot = fmaf(fa[j], fb[j], dot);
  return dot;
}

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

// Block-wide sum of one value per thread (kMoeWarps warps): warp sums, then warp 0's .. warp 7's in order;
// `scratch` holds kMoeWarps floats. Every thread gets the result.
__device__ __forceinline__ float moe_block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = scratch[0];
#pragma unroll
  for (int w = 1; w < kMoeWarps; ++w) r = r + scratch[w];
  return r;
}

// Softmax top-k of one token's router logits by a block of kMoeWarps warps (E <= 2 * blockDim.x), with the rank
// count over candidates only: the kMoeWarps warps' maxima are distinct experts, so when K <= kMoeWarps the K-th
// largest logit is >= their minimum tau and only experts with a logit >= tau can be chosen; an expert's rank (how
// many experts have a larger logit, ties going to the lower id) only counts experts that beat it, which are
// candidates too. So each candidate is ranked against the candidates (typically ~10-30 of E) instead of every
// thread scanning all E logits. Weights as transformers computes them: softmax probabilities, optionally
// renormalised over the K, then rounded to the storage type (round_weights = false: left in fp32, as
// revolta::moe_topk_softmax returns them). The logits are read through L2 (they may come from other blocks of the
// same kernel). Results in shared memory (ids, wts); `cand` holds E ints, `candv` E floats, `ncand` one int,
// `scratch` kMoeWarps floats (shared memory).
template <typename T>
__device__ void moe_route_block_cand(const T* logits, int E, int K, int renormalize, float* scratch, int* ids,
                                     float* wts, int* cand, float* candv, int* ncand, bool round_weights = true) {
  constexpr int NT = kMoeWarps * 32;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float v[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int e = tid + i * NT;
    v[i] = e < E ? to_float(ldcg(logits + e)) : -INFINITY;
  }
  const float part = warp_max(fmaxf(v[0], v[1]));
  if (tid == 0) *ncand = 0;
  if (tid < K) ids[tid] = 0;  // in range whatever the logits (NaN)
  __syncthreads();
  if (lane == 0) scratch[warp] = part;
  __syncthreads();
  float mx = scratch[0], tau = scratch[0];
#pragma unroll
  for (int w = 1; w < kMoeWarps; ++w) {
    mx = fmaxf(mx, scratch[w]);
    tau = fminf(tau, scratch[w]);
  }
  if (K > kMoeWarps) tau = -INFINITY;
  const float sum = moe_block_sum(expf(v[0] - mx) + expf(v[1] - mx), scratch);  // barriers: ncand = 0 seen
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int e = tid + i * NT;
    if (e < E && v[i] >= tau) {
      const int slot = atomicAdd(ncand, 1);
      cand[slot] = e;
      candv[slot] = v[i];
    }
  }
  __syncthreads();
  const int C = *ncand;
  for (int c = tid; c < C; c += NT) {
    const int e = cand[c];
    const float ve = candv[c];
    int rank = 0;
#pragma unroll 4
    for (int k = 0; k < C; ++k) {
      const float l = candv[k];
      rank += (l > ve || (l == ve && cand[k] < e));
    }
    if (rank < K) {
      ids[rank] = e;
      wts[rank] = expf(ve - mx) / sum;
    }
  }
  __syncthreads();
  if (tid < 32) {
    float w = lane < K ? wts[lane] : 0.f;
    const float total = warp_sum(w);
    const float r = renormalize ? w / total : w;
    if (lane < K) wts[lane] = round_weights ? to_float(from_float<T>(r)) : r;
  }
  __syncthreads();
}

}  // namespace revolta
