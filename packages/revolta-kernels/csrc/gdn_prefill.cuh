// The gated delta rule (delta_rule.cuh has the recurrence) over variable-length sequences: the prefill of a Gated
// DeltaNet layer, tokens in order, states in a slot pool, with snapshots of a sequence's state after given lengths
// (prefix caching). Self-contained for NVRTC (CUDA headers only); sm_70-legal: fp32 math, fp16/bf16 only as storage.
#pragma once

#include "common.cuh"

namespace revolta {

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
