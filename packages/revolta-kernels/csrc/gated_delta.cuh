// Gated delta rule (Gated DeltaNet linear attention) over fp32 recurrent states kept in a slot pool.
// Self-contained for NVRTC (CUDA headers only); sm_70-legal: fp32 math, fp16/bf16 only as storage.
//
// Per value head the state S is [DK, Dv] float32 (row i = key dim, column j = value dim). For each token:
//   S <- exp(g) S;  delta = beta (v - S^T k);  S <- S + k delta^T;  o = S^T q
// with q, k optionally L2-normalised (x * rsqrt(sum x^2 + 1e-6)) and q scaled by DK^-0.5. Value head h reads
// key head h / (Hv / Hk). Both kernels use o_j = e^g (S^T q)_j + delta_j (k . q), so one pass over S gives the
// two column sums S^T k and S^T q before S is updated.
#pragma once

#include "common.cuh"

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

struct GdnPrefillParams {
  const void* q;  // [T, Hk, DK]
  const void* k;
  const void* v;  // [T, Hv, Dv]
  const float* g;  // [T, Hv]
  const void* beta;  // [T, Hv]
  float* states;  // [S, Hv, DK, Dv]
  const int64_t* state_indices;  // [num_seqs]
  const int* query_start_loc;  // [num_seqs + 1]
  const int* snap_offsets;  // [num_seqs + 1] into the snapshot arrays sorted by (seq, len), or null
  const int64_t* snap_len;  // new tokens of the sequence after which the state is copied
  const int64_t* snap_slot;  // ... into this slot
  void* out;  // [T, Hv, Dv] contiguous
  long long q_stride_t, q_stride_h, k_stride_t, k_stride_h, v_stride_t, v_stride_h, g_stride_t, beta_stride_t;
  int num_seqs, num_k_heads, num_v_heads, dv, use_l2norm;
};

// N consecutive elements (N * sizeof(T) bytes, aligned to that) widened to float.
template <typename T, int N> struct VecLoad;
template <> struct VecLoad<__half, 4> {
  static __device__ __forceinline__ void run(const __half* p, float* o) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
    o[0] = a.x; o[1] = a.y; o[2] = b.x; o[3] = b.y;
  }
};
template <> struct VecLoad<__half, 2> {
  static __device__ __forceinline__ void run(const __half* p, float* o) {
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(p));
    o[0] = a.x; o[1] = a.y;
  }
};
template <> struct VecLoad<__nv_bfloat16, 4> {
  static __device__ __forceinline__ void run(const __nv_bfloat16* p, float* o) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    o[0] = __uint_as_float(u.x << 16); o[1] = __uint_as_float(u.x & 0xffff0000u);
    o[2] = __uint_as_float(u.y << 16); o[3] = __uint_as_float(u.y & 0xffff0000u);
  }
};
template <> struct VecLoad<__nv_bfloat16, 2> {
  static __device__ __forceinline__ void run(const __nv_bfloat16* p, float* o) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(p);
    o[0] = __uint_as_float(u << 16); o[1] = __uint_as_float(u & 0xffff0000u);
  }
};
template <> struct VecLoad<float, 4> {
  static __device__ __forceinline__ void run(const float* p, float* o) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
  }
};
template <> struct VecLoad<float, 2> {
  static __device__ __forceinline__ void run(const float* p, float* o) {
    const float2 a = *reinterpret_cast<const float2*>(p);
    o[0] = a.x; o[1] = a.y;
  }
};

// ------------------------------------------------------------------------------------------------- decode
// Block = (64 value columns, value head, sequence), 256 threads: thread = (row group rg in 0..15, column quad).
// It holds rows rg, rg + 16, ... of its 4 columns (DK / 16 float4 in registers): the state is read once with
// 16-byte loads, reduced over rows (shuffle + shared memory), updated and written back once.
constexpr int kGdnDecodeThreads = 256;
constexpr int kGdnDecodeCols = 64;

template <typename T, int DK>
__global__ void __launch_bounds__(kGdnDecodeThreads) gdn_decode_kernel(GdnDecodeParams p) {
  static_assert(DK % 32 == 0 && 2 * DK <= kGdnDecodeThreads, "DK must be 32, 64 or 128");
  constexpr int ROWS = DK / 16;
  constexpr int WARPS = kGdnDecodeThreads / 32;
  __shared__ float qk[2 * DK];  // raw k then raw q (fp32)
  __shared__ float4 red[WARPS][2][16];  // per warp: column sums S^T k, S^T q of the 64 columns
  __shared__ float norms[DK / 32][3];  // per warp of the q/k load: sum k^2, sum q^2, sum k q

  const int tid = threadIdx.x, quad = tid & 15, rg = tid >> 4, lane = tid & 31, warp = tid >> 5;
  const int b = blockIdx.z, h = blockIdx.y;
  const int col = blockIdx.x * kGdnDecodeCols + quad * 4;
  T* out = static_cast<T*>(p.out) + (static_cast<size_t>(b) * p.num_v_heads + h) * p.dv + col;
  const long long slot = p.state_indices[b];
  if (slot < 0) {  // padding row: touch no state
    if (rg == 0) {
#pragma unroll
      for (int c = 0; c < 4; ++c) out[c] = from_float<T>(0.f);
    }
    return;
  }
  float* S = p.states + (static_cast<size_t>(slot) * p.num_v_heads + h) * DK * p.dv + col;
  float4 s[ROWS];
#pragma unroll
  for (int m = 0; m < ROWS; ++m) s[m] = *reinterpret_cast<const float4*>(S + static_cast<size_t>(rg + 16 * m) * p.dv);

  const int kh = h / (p.num_v_heads / p.num_k_heads);
  if (tid < DK) {
    qk[tid] = to_float(static_cast<const T*>(p.k)[b * p.k_stride_b + kh * p.k_stride_h + tid]);
  } else if (tid < 2 * DK) {
    qk[tid] = to_float(static_cast<const T*>(p.q)[b * p.q_stride_b + kh * p.q_stride_h + tid - DK]);
  }
  const float eg = expf(p.g[b * p.g_stride_b + h]);
  const float bt = to_float(static_cast<const T*>(p.beta)[b * p.beta_stride_b + h]);
  float vv[4];
  const T* vp = static_cast<const T*>(p.v) + b * p.v_stride_b + h * p.v_stride_h + col;
#pragma unroll
  for (int c = 0; c < 4; ++c) vv[c] = to_float(vp[c]);
  __syncthreads();
  if (tid < DK) {
    const float kx = qk[tid], qx = qk[DK + tid];
    const float a = warp_sum(kx * kx), c = warp_sum(qx * qx), d = warp_sum(kx * qx);
    if (lane == 0) {
      norms[warp][0] = a;
      norms[warp][1] = c;
      norms[warp][2] = d;
    }
  }
  float sk[4] = {0.f, 0.f, 0.f, 0.f}, sq[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int m = 0; m < ROWS; ++m) {
    const float kx = qk[rg + 16 * m], qx = qk[DK + rg + 16 * m];
    sk[0] += s[m].x * kx; sk[1] += s[m].y * kx; sk[2] += s[m].z * kx; sk[3] += s[m].w * kx;
    sq[0] += s[m].x * qx; sq[1] += s[m].y * qx; sq[2] += s[m].z * qx; sq[3] += s[m].w * qx;
  }
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
  float ssk = 0.f, ssq = 0.f, dot = 0.f;
#pragma unroll
  for (int w = 0; w < DK / 32; ++w) {
    ssk += norms[w][0];
    ssq += norms[w][1];
    dot += norms[w][2];
  }
  float SK[4] = {0.f, 0.f, 0.f, 0.f}, SQ[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    const float4 a = red[w][0][quad], c = red[w][1][quad];
    SK[0] += a.x; SK[1] += a.y; SK[2] += a.z; SK[3] += a.w;
    SQ[0] += c.x; SQ[1] += c.y; SQ[2] += c.z; SQ[3] += c.w;
  }
  const float kn = p.use_l2norm ? rsqrtf(ssk + 1e-6f) : 1.f;
  const float qn = (p.use_l2norm ? rsqrtf(ssq + 1e-6f) : 1.f) * rsqrtf(static_cast<float>(DK));
  const float kq = dot * kn * qn;
  float delta[4], o[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    delta[c] = bt * (vv[c] - eg * kn * SK[c]);
    o[c] = eg * qn * SQ[c] + delta[c] * kq;
  }
#pragma unroll
  for (int m = 0; m < ROWS; ++m) {
    const float kx = kn * qk[rg + 16 * m];
    float4 r;
    r.x = fmaf(eg, s[m].x, kx * delta[0]);
    r.y = fmaf(eg, s[m].y, kx * delta[1]);
    r.z = fmaf(eg, s[m].z, kx * delta[2]);
    r.w = fmaf(eg, s[m].w, kx * delta[3]);
    *reinterpret_cast<float4*>(S + static_cast<size_t>(rg + 16 * m) * p.dv) = r;
  }
  if (rg == 0) {
#pragma unroll
    for (int c = 0; c < 4; ++c) out[c] = from_float<T>(o[c]);
  }
}

// ------------------------------------------------------------------------------------------------ prefill
// Recurrent form, tokens streamed in order. Block = (16 value columns, value head, sequence), 4 warps; lane =
// (row segment seg in 0..7, column cw in 0..3): each thread keeps DK / 8 rows of one column in registers, so a
// token costs two short dot products, three shuffle rounds and a register update, and no block barrier.
// q/k/v/g/beta of the next kGdnChunk tokens are fetched into registers while the current chunk runs, then
// normalised into shared memory (one warp per token). Outputs are staged per chunk and stored coalesced.
constexpr int kGdnPrefillThreads = 128;
constexpr int kGdnPrefillCols = 16;
constexpr int kGdnChunk = 32;
constexpr int kGdnSegs = 8;

template <typename T, int DK>
struct GdnPrefillSmem {
  static constexpr int R = DK / kGdnSegs;  // rows per thread
  static constexpr int SEG_STRIDE = R + 4;  // padding: the 8 segments' 16-byte loads hit distinct banks
  static constexpr int ROW = kGdnSegs * SEG_STRIDE;
  float k[kGdnChunk][ROW];
  float q[kGdnChunk][ROW];
  float v[kGdnChunk][kGdnPrefillCols];
  float o[kGdnChunk][kGdnPrefillCols];
  float eg[kGdnChunk], beta[kGdnChunk], kq[kGdnChunk];
};

template <typename T, int DK>
__global__ void __launch_bounds__(kGdnPrefillThreads) gdn_prefill_kernel(GdnPrefillParams p) {
  static_assert(DK == 64 || DK == 128, "DK must be 64 or 128");
  using Smem = GdnPrefillSmem<T, DK>;
  constexpr int R = Smem::R, SEG_STRIDE = Smem::SEG_STRIDE;
  constexpr int EPL = DK / 32;  // q/k elements per lane in the load phase
  constexpr int TPW = kGdnChunk / 4;  // tokens per warp in the load phase
  constexpr int VPT = kGdnChunk * kGdnPrefillCols / kGdnPrefillThreads;  // v elements per thread
  __shared__ Smem sm;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seg = lane >> 2, cl = warp * 4 + (lane & 3);  // cl: column within the block's 16
  const int h = blockIdx.y, b = blockIdx.z;
  const int col0 = blockIdx.x * kGdnPrefillCols;
  const int kh = h / (p.num_v_heads / p.num_k_heads);
  const int start = p.query_start_loc[b];
  const int n = p.query_start_loc[b + 1] - start;
  const long long slot = p.state_indices[b];
  const size_t head_elems = static_cast<size_t>(DK) * p.dv;
  const size_t head_off = static_cast<size_t>(h) * head_elems + col0 + cl;
  if (slot < 0) return;
  float* S = p.states + static_cast<size_t>(slot) * p.num_v_heads * head_elems + head_off;
  float s[R];
#pragma unroll
  for (int i = 0; i < R; ++i) s[i] = S[static_cast<size_t>(seg * R + i) * p.dv];

  int snap = 0, snap_end = 0;
  if (p.snap_offsets != nullptr) {
    snap = p.snap_offsets[b];
    snap_end = p.snap_offsets[b + 1];
  }
  auto take_snapshots = [&](long long done) {
    while (snap < snap_end && p.snap_len[snap] <= done) {
      if (p.snap_len[snap] == done) {
        float* D = p.states + static_cast<size_t>(p.snap_slot[snap]) * p.num_v_heads * head_elems + head_off;
#pragma unroll
        for (int i = 0; i < R; ++i) D[static_cast<size_t>(seg * R + i) * p.dv] = s[i];
      }
      ++snap;
    }
  };
  take_snapshots(0);

  const T* qg = static_cast<const T*>(p.q);
  const T* kg = static_cast<const T*>(p.k);
  const T* vg = static_cast<const T*>(p.v);
  const T* bg = static_cast<const T*>(p.beta);
  // registers of the chunk being fetched
  float rk[TPW][EPL], rq[TPW][EPL], rv[VPT], rscalar = 0.f;

  auto fetch = [&](int c0) {
#pragma unroll
    for (int j = 0; j < TPW; ++j) {
      const int t = c0 + warp + 4 * j;
      if (t < n) {
        const long long tok = start + t;
        VecLoad<T, EPL>::run(kg + tok * p.k_stride_t + kh * p.k_stride_h + lane * EPL, rk[j]);
        VecLoad<T, EPL>::run(qg + tok * p.q_stride_t + kh * p.q_stride_h + lane * EPL, rq[j]);
      } else {
#pragma unroll
        for (int e = 0; e < EPL; ++e) rk[j][e] = rq[j][e] = 0.f;
      }
    }
#pragma unroll
    for (int e = 0; e < VPT; ++e) {
      const int idx = tid + e * kGdnPrefillThreads, t = c0 + idx / kGdnPrefillCols;
      rv[e] = t < n ? to_float(vg[(start + t) * static_cast<long long>(p.v_stride_t) + h * p.v_stride_h + col0 +
                                   idx % kGdnPrefillCols])
                    : 0.f;
    }
    if (tid < kGdnChunk) {
      const int t = c0 + tid;
      rscalar = t < n ? p.g[(start + t) * static_cast<long long>(p.g_stride_t) + h] : 0.f;
    } else if (tid < 2 * kGdnChunk) {
      const int t = c0 + tid - kGdnChunk;
      rscalar = t < n ? to_float(bg[(start + t) * static_cast<long long>(p.beta_stride_t) + h]) : 0.f;
    }
  };
  auto stage = [&]() {  // registers -> shared memory, q/k normalised, q scaled, k.q per token
    const float scale = rsqrtf(static_cast<float>(DK));
#pragma unroll
    for (int j = 0; j < TPW; ++j) {
      const int t = warp + 4 * j;
      float ssk = 0.f, ssq = 0.f, dot = 0.f;
#pragma unroll
      for (int e = 0; e < EPL; ++e) {
        ssk += rk[j][e] * rk[j][e];
        ssq += rq[j][e] * rq[j][e];
        dot += rk[j][e] * rq[j][e];
      }
      ssk = warp_sum(ssk);
      ssq = warp_sum(ssq);
      dot = warp_sum(dot);
      const float kn = p.use_l2norm ? rsqrtf(ssk + 1e-6f) : 1.f;
      const float qn = (p.use_l2norm ? rsqrtf(ssq + 1e-6f) : 1.f) * scale;
#pragma unroll
      for (int e = 0; e < EPL; ++e) {
        const int row = lane * EPL + e;
        const int at = (row / R) * SEG_STRIDE + row % R;
        sm.k[t][at] = rk[j][e] * kn;
        sm.q[t][at] = rq[j][e] * qn;
      }
      if (lane == 0) sm.kq[t] = dot * kn * qn;
    }
#pragma unroll
    for (int e = 0; e < VPT; ++e) {
      const int idx = tid + e * kGdnPrefillThreads;
      sm.v[idx / kGdnPrefillCols][idx % kGdnPrefillCols] = rv[e];
    }
    if (tid < kGdnChunk) {
      sm.eg[tid] = expf(rscalar);
    } else if (tid < 2 * kGdnChunk) {
      sm.beta[tid - kGdnChunk] = rscalar;
    }
  };

  T* out = static_cast<T*>(p.out);
  const long long out_tok = static_cast<long long>(p.num_v_heads) * p.dv;
  fetch(0);
  stage();
  __syncthreads();
  for (int c0 = 0; c0 < n; c0 += kGdnChunk) {
    const int len = min(kGdnChunk, n - c0);
    if (c0 + kGdnChunk < n) fetch(c0 + kGdnChunk);
    for (int t = 0; t < len; ++t) {
      const float* kr = &sm.k[t][seg * SEG_STRIDE];
      const float* qr = &sm.q[t][seg * SEG_STRIDE];
      float kk[R], qq[R];
#pragma unroll
      for (int i = 0; i < R; i += 4) {
        const float4 a = *reinterpret_cast<const float4*>(kr + i);
        const float4 c = *reinterpret_cast<const float4*>(qr + i);
        kk[i] = a.x; kk[i + 1] = a.y; kk[i + 2] = a.z; kk[i + 3] = a.w;
        qq[i] = c.x; qq[i + 1] = c.y; qq[i + 2] = c.z; qq[i + 3] = c.w;
      }
      float sk0 = 0.f, sk1 = 0.f, sq0 = 0.f, sq1 = 0.f;
#pragma unroll
      for (int i = 0; i < R; i += 2) {
        sk0 = fmaf(s[i], kk[i], sk0);
        sk1 = fmaf(s[i + 1], kk[i + 1], sk1);
        sq0 = fmaf(s[i], qq[i], sq0);
        sq1 = fmaf(s[i + 1], qq[i + 1], sq1);
      }
      float sk = sk0 + sk1, sq = sq0 + sq1;
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) {
        sk += __shfl_xor_sync(0xffffffffu, sk, o);
        sq += __shfl_xor_sync(0xffffffffu, sq, o);
      }
      const float eg = sm.eg[t];
      const float delta = sm.beta[t] * (sm.v[t][cl] - eg * sk);
      const float ov = eg * sq + delta * sm.kq[t];
#pragma unroll
      for (int i = 0; i < R; ++i) s[i] = fmaf(eg, s[i], kk[i] * delta);
      if (seg == 0) sm.o[t][cl] = ov;
      if (snap < snap_end) take_snapshots(c0 + t + 1);
    }
    __syncthreads();  // the chunk's shared memory is read and its outputs staged
#pragma unroll
    for (int e = 0; e < VPT; ++e) {
      const int idx = tid + e * kGdnPrefillThreads, t = idx / kGdnPrefillCols, c = idx % kGdnPrefillCols;
      if (t < len) out[(start + c0 + t) * out_tok + static_cast<long long>(h) * p.dv + col0 + c] =
          from_float<T>(sm.o[t][c]);
    }
    if (c0 + kGdnChunk < n) stage();
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < R; ++i) S[static_cast<size_t>(seg * R + i) * p.dv] = s[i];
}

}  // namespace revolta
