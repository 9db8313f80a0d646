// The gated delta rule's decode update (Gated DeltaNet linear attention), the pieces every decode kernel shares.
// Self-contained for NVRTC (CUDA headers only); sm_70-legal: fp32 math, fp16/bf16 only as storage.
//
// Per value head the state S is [DK, Dv] float32 (row i = key dim, column j = value dim). For each token:
//   S <- exp(g) S;  delta = beta (v - S^T k);  S <- S + k delta^T;  o = S^T q
// with q, k optionally L2-normalised (x * rsqrt(sum x^2 + 1e-6)) and q scaled by DK^-0.5. Value head h reads
// key head h / (Hv / Hk). The kernels use o_j = e^g (S^T q)_j + delta_j (k . q), so one pass over S gives the
// two column sums S^T k and S^T q before S is updated. A decode block has kGdnDecodeThreads threads; each holds
// ROWS float4 of the state (4 columns of rows r0, r0 + RS, ...) in registers, and the block's raw k then raw q
// (2 DK floats) in shared memory `qk`.
#pragma once

#include "common.cuh"

namespace revolta {

constexpr int kGdnDecodeThreads = 256;

// Threads < DK (one warp per 32 elements): sum k^2, sum q^2 and sum k q of the warp's elements into norms[warp].
template <int DK>
__device__ __forceinline__ void gdn_qk_partial_norms(const float* qk, float (*norms)[3]) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid < DK) {
    const float kx = qk[tid], qx = qk[DK + tid];
    const float a = warp_sum(kx * kx), c = warp_sum(qx * qx), d = warp_sum(kx * qx);
    if (lane == 0) {
      norms[warp][0] = a;
      norms[warp][1] = c;
      norms[warp][2] = d;
    }
  }
}

// The whole of sum k^2, sum q^2 and sum k q from the partial norms.
template <int DK>
__device__ __forceinline__ void gdn_sum_norms(const float (*norms)[3], float& ssk, float& ssq, float& dot) {
  ssk = 0.f;
  ssq = 0.f;
  dot = 0.f;
#pragma unroll
  for (int w = 0; w < DK / 32; ++w) {
    ssk += norms[w][0];
    ssq += norms[w][1];
    dot += norms[w][2];
  }
}

// This thread's part of the column sums S^T k and S^T q: its rows r0 + RS m (m < ROWS) of its 4 columns.
template <int DK, int ROWS, int RS>
__device__ __forceinline__ void gdn_column_sums(const float4 (&s)[ROWS], const float* qk, int r0, float (&sk)[4],
                                                float (&sq)[4]) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    sk[c] = 0.f;
    sq[c] = 0.f;
  }
#pragma unroll
  for (int m = 0; m < ROWS; ++m) {
    const float kx = qk[r0 + RS * m], qx = qk[DK + r0 + RS * m];
    sk[0] += s[m].x * kx; sk[1] += s[m].y * kx; sk[2] += s[m].z * kx; sk[3] += s[m].w * kx;
    sq[0] += s[m].x * qx; sq[1] += s[m].y * qx; sq[2] += s[m].z * qx; sq[3] += s[m].w * qx;
  }
}

// The column sums of 4 columns (entry i of each warp's red[w][0] = S^T k, red[w][1] = S^T q), added over the warps.
template <int WARPS, int N>
__device__ __forceinline__ void gdn_sum_warps(const float4 (&red)[WARPS][2][N], int i, float (&SK)[4],
                                              float (&SQ)[4]) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    SK[c] = 0.f;
    SQ[c] = 0.f;
  }
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    const float4 a = red[w][0][i], c = red[w][1][i];
    SK[0] += a.x; SK[1] += a.y; SK[2] += a.z; SK[3] += a.w;
    SQ[0] += c.x; SQ[1] += c.y; SQ[2] += c.z; SQ[3] += c.w;
  }
}

// delta and the output o of 4 columns from the sums (eg = exp(g), bt = beta, vv = v); returns k's scale kn.
template <int DK>
__device__ __forceinline__ float gdn_delta_out(int use_l2norm, float ssk, float ssq, float dot, float eg, float bt,
                                               const float (&vv)[4], const float (&SK)[4], const float (&SQ)[4],
                                               float (&delta)[4], float (&o)[4]) {
  const float kn = use_l2norm ? rsqrtf(ssk + 1e-6f) : 1.f;
  const float qn = (use_l2norm ? rsqrtf(ssq + 1e-6f) : 1.f) * rsqrtf(static_cast<float>(DK));
  const float kq = dot * kn * qn;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    delta[c] = bt * (vv[c] - eg * kn * SK[c]);
    o[c] = eg * qn * SQ[c] + delta[c] * kq;
  }
  return kn;
}

// The updated state of this thread's rows r0 + RS m: e^g S + (kn k) delta^T, stored with 16-byte stores (S points at
// the thread's first column of row 0; rows row_stride floats apart).
template <int ROWS, int RS>
__device__ __forceinline__ void gdn_store_state(float* S, size_t row_stride, const float4 (&s)[ROWS], const float* qk,
                                                int r0, float kn, float eg, const float (&delta)[4]) {
#pragma unroll
  for (int m = 0; m < ROWS; ++m) {
    const int r = r0 + RS * m;
    const float kx = kn * qk[r];
    float4 u;
    u.x = fmaf(eg, s[m].x, kx * delta[0]);
    u.y = fmaf(eg, s[m].y, kx * delta[1]);
    u.z = fmaf(eg, s[m].z, kx * delta[2]);
    u.w = fmaf(eg, s[m].w, kx * delta[3]);
    *reinterpret_cast<float4*>(S + static_cast<size_t>(r) * row_stride) = u;
  }
}

}  // namespace revolta
