// Mixture-of-experts decode (moe.cuh), v2: the router GEMV and the up2/down2 pair (opt-in, measured slower).
#pragma once

#include "moe_v1.cuh"

namespace revolta {

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

}  // namespace revolta
