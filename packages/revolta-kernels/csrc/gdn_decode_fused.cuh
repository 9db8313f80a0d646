// A Gated DeltaNet layer's whole decode step after (or, CONV, with) its conv, for Dv = 128: gating (g, beta from the
// a/b projections, as gdn_gating_kernel), the delta rule (delta_rule.cuh) and the gated RMSNorm of each head's output
// with silu(z). Each head's 128 columns are split over 4 blocks of 32 (at batch 1 a 32-head layer has 128 blocks
// instead of 32, so the latency-bound step spreads over the GPU; measured faster than one block per head at every
// batch on an H200, 4.9 / 6.2 / 51.8 us at batch 1 / 2 / 32 against 7.7 / 8.5 / 73.4). The delta rule is independent
// per value column; only the gated RMSNorm needs the whole head: every block stores its columns' pre-norm output
// (already rounded to the storage type, so the store is exact), and the last of the head's 4 blocks to arrive (an
// arrival counter per (sequence, head) in a caller-owned zeroed buffer, re-armed by that block) reads them back and
// writes the normalised output. Launched with PDL (pdl.cuh): only the norm weight / A_log / dt_bias (and the conv
// weights) are read before pdl_wait().
// CONV = true also does the layer's conv1d update (conv1d.cuh, same arithmetic): each block convolves the q/k
// channels of its key head and its 32 v channels; it shifts its v channels' conv states itself, while the q/k
// channels' states, read by all 4 * (Hv / Hk) blocks of the key head, are shifted by the last of them to arrive (a
// second arrival counter per (sequence, key head), after each block's reads).
// Self-contained for NVRTC; fp32 math, fp16/bf16/fp32 storage.
#pragma once

#include "conv1d.cuh"
#include "cuda_compat.cuh"
#include "delta_rule.cuh"
#include "gdn_gating.cuh"
#include "pdl.cuh"

namespace revolta {

struct GdnFusedParams {
  const void* q;  // [B, Hk, DK] strided
  const void* k;
  const void* v;  // [B, Hv, 128] strided
  const void* a;  // [B, Hv] (row stride a_stride_b): decay input
  const void* b;  // [B, Hv]: beta logits
  const void* a_log;  // [Hv]
  const void* dt_bias;  // [Hv]
  const void* z;  // [B, Hv, 128] strided: output gate
  const void* norm_weight;  // [128]
  float* states;  // [S, Hv, DK, 128]
  const int64_t* state_indices;  // [B]; a negative slot leaves the pool alone and outputs zeros
  void* out;  // [B, Hv, 128] contiguous
  long long q_stride_b, q_stride_h, k_stride_b, k_stride_h, v_stride_b, v_stride_h, a_stride_b, b_stride_b,
      z_stride_b, z_stride_h;
  int batch, num_k_heads, num_v_heads, use_l2norm;
  float eps;
};

// The layer's causal conv1d update folded into the fused step (gdn_decode_fused_kernel<.., true>):
// x is the in_proj's pre-conv [q | k | v] row, as conv1d_update_kernel takes it (no bias, silu).
struct GdnConvParams {
  const void* x;  // [B, conv_dim] (row stride x_stride)
  const void* weight;  // [conv_dim, K]
  void* conv_states;  // [S, conv_dim, K - 1]
  long long x_stride;
  int conv_dim, K, key_dim;  // q channels [0, key_dim), k [key_dim, 2 key_dim), v [2 key_dim, conv_dim)
};

constexpr int kGdnFusedDv = 128;

// Block = (32-column chunk, value head, sequence), 256 threads: lane l holds columns 4 (l & 7) .. + 3 of the
// chunk and rows 4 w + (l >> 3) + 32 m (warp w, m < DK / 32), so each quarter-warp reads one 128-byte row piece.
constexpr int kGdnSplitCols = 32;
constexpr int kGdnSplitChunks = kGdnFusedDv / kGdnSplitCols;

template <typename T, int DK, bool CONV = false>
__global__ void __launch_bounds__(kGdnDecodeThreads)
    gdn_decode_fused_kernel(GdnFusedParams p, int* counters, GdnConvParams cv) {
  static_assert(DK % 32 == 0 && 2 * DK <= kGdnDecodeThreads, "DK must be 32, 64 or 128");
  constexpr int DV = kGdnFusedDv, WARPS = kGdnDecodeThreads / 32, ROWS = DK / 32;
  __shared__ float qk[2 * DK];
  __shared__ float4 red[WARPS][2][8];
  __shared__ float norms[DK / 32][3];
  __shared__ int last;
  __shared__ int qk_last;
  __shared__ float vconv[CONV ? kGdnSplitCols : 1];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, c4 = lane & 7, rsub = lane >> 3;
  const int chunk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int col = chunk * kGdnSplitCols + 4 * c4;
  const int kh = h / (p.num_v_heads / p.num_k_heads);
  // CONV: this thread's q/k channel (tid < 2 DK) and, for tid < 32, one of the chunk's v channels
  const int ch_qk = tid < DK ? cv.key_dim + kh * DK + tid : kh * DK + tid - DK;
  const int ch_v = 2 * cv.key_dim + h * kGdnFusedDv + chunk * kGdnSplitCols + tid;
  const int W = cv.K - 1;
  float wqk[kConvMaxWidth], wv[kConvMaxWidth];
  if (CONV) {
    const T* wt = static_cast<const T*>(cv.weight);
#pragma unroll
    for (int j = 0; j < kConvMaxWidth; ++j) {
      wqk[j] = (tid < 2 * DK && j <= W) ? to_float(wt[static_cast<size_t>(ch_qk) * cv.K + j]) : 0.f;
      wv[j] = (tid < kGdnSplitCols && j <= W) ? to_float(wt[static_cast<size_t>(ch_v) * cv.K + j]) : 0.f;
    }
  }
  // weights (nobody writes them) before the wait
  const float alog = to_float(static_cast<const T*>(p.a_log)[h]);
  const float dtb = to_float(static_cast<const T*>(p.dt_bias)[h]);
  float ww[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) ww[c] = warp == 0 ? to_float(static_cast<const T*>(p.norm_weight)[4 * lane + c]) : 0.f;
  pdl_wait();
  pdl_trigger();
  T* out_head = static_cast<T*>(p.out) + (static_cast<size_t>(b) * p.num_v_heads + h) * DV;
  const long long slot = p.state_indices[b];
  if (slot < 0) {
    if (warp == 0 && rsub == 0) {
#pragma unroll
      for (int c = 0; c < 4; ++c) out_head[col + c] = from_float<T>(0.f);
    }
    return;
  }
  float* S = p.states + (static_cast<size_t>(slot) * p.num_v_heads + h) * DK * DV + col;
  float4 s[ROWS];
#pragma unroll
  for (int m = 0; m < ROWS; ++m) {
    s[m] = *reinterpret_cast<const float4*>(S + static_cast<size_t>(4 * warp + rsub + 32 * m) * DV);
  }
  float hqk[kConvMaxWidth], xqk = 0.f;
  T* cs = static_cast<T*>(cv.conv_states) + static_cast<size_t>(slot) * cv.conv_dim * W;
  if (!CONV) {
    if (tid < DK) {
      qk[tid] = to_float(static_cast<const T*>(p.k)[b * p.k_stride_b + kh * p.k_stride_h + tid]);
    } else if (tid < 2 * DK) {
      qk[tid] = to_float(static_cast<const T*>(p.q)[b * p.q_stride_b + kh * p.q_stride_h + tid - DK]);
    }
  } else {
    const T* xr = static_cast<const T*>(cv.x) + b * cv.x_stride;
    if (tid < 2 * DK) {
#pragma unroll
      for (int j = 0; j < kConvMaxWidth - 1; ++j) hqk[j] = j < W ? to_float(cs[static_cast<size_t>(ch_qk) * W + j]) : 0.f;
      xqk = to_float(xr[ch_qk]);
      qk[tid] = conv_silu_channel<T>(wqk, hqk, xqk, W);
    }
    if (tid < kGdnSplitCols) {  // this block's own v channel: its state is shifted right away
      float hv[kConvMaxWidth];
      T* st = cs + static_cast<size_t>(ch_v) * W;
#pragma unroll
      for (int j = 0; j < kConvMaxWidth - 1; ++j) hv[j] = j < W ? to_float(st[j]) : 0.f;
      const T xv = xr[ch_v];
      vconv[tid] = conv_silu_channel<T>(wv, hv, to_float(xv), W);
      conv_shift_state<T>(st, hv, xv, W);
    }
  }
  // gating, as gdn_gating_kernel: g in float32, beta rounded to the storage type
  const float eg = expf(gdn_log_decay(to_float(static_cast<const T*>(p.a)[b * p.a_stride_b + h]), dtb, alog));
  const float bt = to_float(from_float<T>(gdn_beta(to_float(static_cast<const T*>(p.b)[b * p.b_stride_b + h]))));
  float vv[4], zz[4];
  const T* vp = static_cast<const T*>(p.v) + b * p.v_stride_b + h * p.v_stride_h + col;
  const T* zp = static_cast<const T*>(p.z) + b * p.z_stride_b + h * p.z_stride_h + 4 * lane;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    vv[c] = CONV ? 0.f : to_float(vp[c]);
    zz[c] = warp == 0 ? to_float(zp[c]) : 0.f;  // the whole head's gate: this block may do the norm
  }
  __syncthreads();
  if (CONV) {
#pragma unroll
    for (int c = 0; c < 4; ++c) vv[c] = vconv[4 * c4 + c];
    if (tid == 0) {  // every thread of this block has read its q/k conv states (barrier above)
      __threadfence();
      int* qk_counter = counters + static_cast<size_t>(p.batch) * p.num_v_heads +
                        static_cast<size_t>(b) * p.num_k_heads + kh;
      const int blocks = kGdnSplitChunks * (p.num_v_heads / p.num_k_heads);
      qk_last = atomicAdd(qk_counter, 1) == blocks - 1;
      if (qk_last) *qk_counter = 0;  // re-armed: every block of the key head has arrived
    }
  }
  gdn_qk_partial_norms<DK>(qk, norms);
  float sk[4], sq[4];
  gdn_column_sums<DK, ROWS, 32>(s, qk, 4 * warp + rsub, sk, sq);
#pragma unroll
  for (int c = 0; c < 4; ++c) {  // over the warp's 4 row groups (lanes l, l ^ 8, l ^ 16, l ^ 24)
    sk[c] += __shfl_xor_sync(0xffffffffu, sk[c], 8);
    sk[c] += __shfl_xor_sync(0xffffffffu, sk[c], 16);
    sq[c] += __shfl_xor_sync(0xffffffffu, sq[c], 8);
    sq[c] += __shfl_xor_sync(0xffffffffu, sq[c], 16);
  }
  if (rsub == 0) {
    red[warp][0][c4] = make_float4(sk[0], sk[1], sk[2], sk[3]);
    red[warp][1][c4] = make_float4(sq[0], sq[1], sq[2], sq[3]);
  }
  __syncthreads();
  if (CONV && qk_last && tid < 2 * DK) {  // the last block of the key head shifts the q/k conv states
    conv_shift_state<T>(cs + static_cast<size_t>(ch_qk) * W, hqk, from_float<T>(xqk), W);
  }
  float ssk, ssq, dot;
  gdn_sum_norms<DK>(norms, ssk, ssq, dot);
  float SK[4], SQ[4];
  gdn_sum_warps(red, c4, SK, SQ);
  float delta[4], o[4];
  const float kn = gdn_delta_out<DK>(p.use_l2norm, ssk, ssq, dot, eg, bt, vv, SK, SQ, delta, o);
#pragma unroll
  for (int c = 0; c < 4; ++c) o[c] = to_float(from_float<T>(o[c]));  // the unfused op's output rounding
  gdn_store_state<ROWS, 32>(S, DV, s, qk, 4 * warp + rsub, kn, eg, delta);
  if (warp != 0) return;
  // pre-norm output of this chunk (exact in the storage type), then the arrival of this block
  if (rsub == 0) {
#pragma unroll
    for (int c = 0; c < 4; ++c) out_head[col + c] = from_float<T>(o[c]);
    __threadfence();
  }
  __syncwarp();
  int* counter = counters + static_cast<size_t>(b) * p.num_v_heads + h;
  if (lane == 0) last = atomicAdd(counter, 1) == kGdnSplitChunks - 1;
  __syncwarp();
  if (!last) return;
  __threadfence();
  float ov[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) ov[c] = to_float(ldcg(out_head + 4 * lane + c));  // other blocks' stores: past L1
  const float ss = warp_sum(ov[0] * ov[0] + ov[1] * ov[1] + ov[2] * ov[2] + ov[3] * ov[3]);
  const float inv = rsqrtf(ss / static_cast<float>(DV) + p.eps);
#pragma unroll
  for (int c = 0; c < 4; ++c) out_head[4 * lane + c] = from_float<T>(gated_norm_value<T>(ov[c], zz[c], ww[c], inv));
  if (lane == 0) *counter = 0;  // every chunk has arrived: re-armed for the next launch
}

}  // namespace revolta
