// The gated delta rule's decode step (delta_rule.cuh), one token per sequence, over a grid sized to the GPU: the
// blocks walk the (sequence, value head, 64-column) items and fetch the next item's state into registers while they
// update the current one, so state reads stay in flight between items instead of each block's load -> compute ->
// store running dry. Self-contained for NVRTC; fp32 math, fp16/bf16/fp32 storage.
//
// Item = 64 value columns of one head of one sequence, 256 threads: thread = (row group rg in 0..15, column quad).
// It holds rows rg, rg + 16, ... of its 4 columns (DK / 16 float4 in registers): the state is read once with
// 16-byte loads, reduced over rows (shuffle + shared memory), updated and written back once.
#pragma once

#include "delta_rule.cuh"

namespace revolta {

struct GdnDecodeParams {
  const void* q;  // [B, Hk, DK] (strides below, last dim contiguous)
  const void* k;
  const void* v;  // [B, Hv, Dv]
  const float* g;  // [B, Hv] log decay (<= 0)
  const void* beta;  // [B, Hv], storage type of v
  float* states;  // [S, Hv, DK, Dv]
  const int64_t* state_indices;  // [B]; a negative slot leaves the pool alone and outputs zeros
  void* out;  // [B, Hv, Dv] contiguous
  long long q_stride_b, q_stride_h, k_stride_b, k_stride_h, v_stride_b, v_stride_h, g_stride_b, beta_stride_b;
  int batch, num_k_heads, num_v_heads, dv, use_l2norm;
};

constexpr int kGdnDecodeCols = 64;

// One item's inputs, fetched ahead into registers.
template <int DK>
struct GdnItemRegs {
  float4 s[DK / 16];
  float qk, g, beta;
  float v[4];
  long long slot;
};

// grid: min(items, resident blocks), items = batch * Hv * (Dv / 64).
template <typename T, int DK>
__global__ void __launch_bounds__(kGdnDecodeThreads, 2) gdn_decode_kernel(GdnDecodeParams p, int items) {
  static_assert(DK % 32 == 0 && 2 * DK <= kGdnDecodeThreads, "DK must be 32, 64 or 128");
  constexpr int ROWS = DK / 16;
  constexpr int WARPS = kGdnDecodeThreads / 32;
  __shared__ float qk[2 * DK];  // raw k then raw q (fp32)
  __shared__ float4 red[WARPS][2][16];  // per warp: column sums S^T k, S^T q of the 64 columns
  __shared__ float norms[DK / 32][3];  // per warp of the q/k load: sum k^2, sum q^2, sum k q
  const int tid = threadIdx.x, quad = tid & 15, rg = tid >> 4, lane = tid & 31, warp = tid >> 5;
  const int nx = p.dv / kGdnDecodeCols, rep = p.num_v_heads / p.num_k_heads;

  auto fetch = [&](int it, GdnItemRegs<DK>& r) {
    const int bh = it / nx, h = bh % p.num_v_heads, b = bh / p.num_v_heads;
    const int col = (it % nx) * kGdnDecodeCols + quad * 4;
    r.slot = p.state_indices[b];
    if (r.slot >= 0) {
      const float* S = p.states + (static_cast<size_t>(r.slot) * p.num_v_heads + h) * DK * p.dv + col;
#pragma unroll
      for (int m = 0; m < ROWS; ++m) r.s[m] = *reinterpret_cast<const float4*>(S + static_cast<size_t>(rg + 16 * m) * p.dv);
    } else {
#pragma unroll
      for (int m = 0; m < ROWS; ++m) r.s[m] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const int kh = h / rep;
    r.qk = 0.f;
    if (tid < DK) {
      r.qk = to_float(static_cast<const T*>(p.k)[b * p.k_stride_b + kh * p.k_stride_h + tid]);
    } else if (tid < 2 * DK) {
      r.qk = to_float(static_cast<const T*>(p.q)[b * p.q_stride_b + kh * p.q_stride_h + tid - DK]);
    }
    r.g = p.g[b * p.g_stride_b + h];
    r.beta = to_float(static_cast<const T*>(p.beta)[b * p.beta_stride_b + h]);
    const T* vp = static_cast<const T*>(p.v) + b * p.v_stride_b + h * p.v_stride_h + col;
#pragma unroll
    for (int c = 0; c < 4; ++c) r.v[c] = to_float(vp[c]);
  };

  auto compute = [&](int it, GdnItemRegs<DK>& r) {
    const int bh = it / nx, h = bh % p.num_v_heads, b = bh / p.num_v_heads;
    const int col = (it % nx) * kGdnDecodeCols + quad * 4;
    __syncthreads();  // every thread is done with the previous item's q/k
    if (tid < 2 * DK) qk[tid] = r.qk;
    __syncthreads();
    gdn_qk_partial_norms<DK>(qk, norms);
    float sk[4], sq[4];
    gdn_column_sums<DK, ROWS, 16>(r.s, qk, rg, sk, sq);
#pragma unroll
    for (int c = 0; c < 4; ++c) {  // row groups rg and rg ^ 1 share a warp
      sk[c] += __shfl_xor_sync(0xffffffffu, sk[c], 16);
      sq[c] += __shfl_xor_sync(0xffffffffu, sq[c], 16);
    }
    if (lane < 16) {
      red[warp][0][quad] = make_float4(sk[0], sk[1], sk[2], sk[3]);
      red[warp][1][quad] = make_float4(sq[0], sq[1], sq[2], sq[3]);
    }
    __syncthreads();
    float ssk, ssq, dot;
    gdn_sum_norms<DK>(norms, ssk, ssq, dot);
    float SK[4], SQ[4];
    gdn_sum_warps(red, quad, SK, SQ);
    const float eg = expf(r.g);
    float delta[4], o[4];
    const float kn = gdn_delta_out<DK>(p.use_l2norm, ssk, ssq, dot, eg, r.beta, r.v, SK, SQ, delta, o);
    if (r.slot >= 0) {
      float* S = p.states + (static_cast<size_t>(r.slot) * p.num_v_heads + h) * DK * p.dv + col;
      gdn_store_state<ROWS, 16>(S, p.dv, r.s, qk, rg, kn, eg, delta);
    }
    if (rg == 0) {
      T* out = static_cast<T*>(p.out) + (static_cast<size_t>(b) * p.num_v_heads + h) * p.dv + col;
#pragma unroll
      for (int c = 0; c < 4; ++c) out[c] = from_float<T>(r.slot >= 0 ? o[c] : 0.f);
    }
  };

  GdnItemRegs<DK> A, B;
  int it = blockIdx.x;
  if (it < items) fetch(it, A);
  while (it < items) {  // two items per trip so the register sets swap roles without copies
    int next = it + gridDim.x;
    if (next < items) fetch(next, B);
    compute(it, A);
    it = next;
    if (it >= items) break;
    next = it + gridDim.x;
    if (next < items) fetch(next, A);
    compute(it, B);
    it = next;
  }
}

}  // namespace revolta
