// Decode attention for one sequence (or a few) with an fp16 cache: a lean variant of the light kernel
// (decode_light.cuh) built for the batch-1 step's latency.
//
// At batch 1 the attention sits between the q/k/v projection and the o projection; what it adds to the step is
// the time from its PDL wait to its last block's exit. The light kernel spends that time in shuffles (16
// threads per key row), three block barriers per tile, a 16-way reduction of the key groups' outputs through
// shared memory, and it holds 207 registers x 256 threads, so none of its blocks start before the q/k/v
// projection's blocks leave their SM. Here:
//   * a block owns one (sequence, KV head, context split) of NT keys per tile, one key per thread: the thread
//     holds its key row in registers (loaded before the PDL wait, cached in L1 so the row's 16-byte pieces that
//     share a sector are read from L2 once) and computes q.k for every query head of the group with no
//     shuffles; the query rows are broadcast from shared memory;
//   * the value rows go to shared memory before the wait; for P.V a thread owns two output dims of HPT
//     query heads and walks the tile's keys, so the outputs need no reduction across threads;
//   * the softmax needs two barriers per tile (the warps' maxima, the warps' sums); the running max and sum
//     live in every thread's registers;
//   * splits write their partials and the last to arrive merges them (merge_splits), as the light kernel does,
//     so the host's split plan and buffers are shared.
// Taken where the light kernel would run, head_dim 64 or 128, no fused rotary, when decode_lean_mode() is on.
// fp32 arithmetic throughout, as the light kernel.
#pragma once

#include "attention.cuh"
#include "quant_gemv_probe.cuh"
#include "weight_load.cuh"

namespace revolta {

// GC: query heads per KV head rounded up to a power of two (1..8). NT threads = keys per tile.
template <int D, int GC>
struct LeanDecodeCfg {
  static constexpr int NT = 128;
  static constexpr int KT = NT;          // keys per tile
  static constexpr int NW = NT / 32;
  static constexpr int CH = D / 8;       // 16-byte pieces of a key row
  static constexpr int VSTRIDE = D + 8;  // halves per shared value row (padding keeps P.V's reads conflict-free)
  static constexpr int PAIRS = D / 2;    // output dim pairs
  static constexpr int NHB = NT / PAIRS; // head blocks of threads (2 at d128, 4 at d64)
  static constexpr int HPT = (GC + NHB - 1) / NHB;  // query heads per thread in P.V
  static constexpr int SMEM_BYTES = KT * VSTRIDE * 2 + GC * D * 4 + KT * GC * 4 + 2 * NW * GC * 4;
  static_assert(D == 64 || D == 128, "lean decode: head_dim 64 or 128");
};

template <int D, int GC>
__device__ const int decode_lean_smem_bytes = LeanDecodeCfg<D, GC>::SMEM_BYTES;

template <int D, int GC>
__global__ void __launch_bounds__(128) paged_decode_lean_kernel(const AttnParams p) {
  using C = LeanDecodeCfg<D, GC>;
  constexpr int NT = C::NT, KT = C::KT, NW = C::NW, CH = C::CH, VS = C::VSTRIDE, HPT = C::HPT;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* sV = reinterpret_cast<__half*>(smem);                   // [KT][VS] value rows
  float* sQ = reinterpret_cast<float*>(sV + KT * VS);             // [GC][D] query rows
  float* sP = sQ + GC * D;                                        // [KT][GC] probabilities
  float* sWM = sP + KT * GC;                                      // [NW][GC] warp maxima
  float* sWL = sWM + NW * GC;                                     // [NW][GC] warp sums

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seq = blockIdx.x / p.num_kv_heads, kvh = blockIdx.x % p.num_kv_heads;
  const int split = blockIdx.z;
  const int group = p.num_heads / p.num_kv_heads;
  const int q0 = p.query_start_loc[seq];
  const int ctx = p.context_lens[seq];
  const int slen = p.split_tokens > 0 ? p.split_tokens : split_len<KT>(ctx, p.num_splits);
  const int n_active = max(1, (ctx + slen - 1) / slen);
  if (split >= n_active) {
    pdl_wait();
    return;
  }
  GEMV_PROBE_DECL
  GEMV_PROBE(0);
  const int kbeg = split * slen, kend = min(ctx, kbeg + slen);
  const int* table = p.block_tables + static_cast<size_t>(seq) * p.max_blocks;
  const size_t block_stride = static_cast<size_t>(p.num_kv_heads) * p.block_size * D;
  const size_t head_off = static_cast<size_t>(kvh) * p.block_size * D;
  const __half* kc = static_cast<const __half*>(p.k_cache);
  const __half* vc = static_cast<const __half*>(p.v_cache);
  auto row_off = [&](int k) {
    return static_cast<size_t>(table[kv_block_index(p, k)]) * block_stride + head_off +
           static_cast<size_t>(kv_block_offset(p, k)) * D;
  };

  // This thread's key (base + tid): its K row into kr, its V row into sV (zeros past kend). The newest key
  // (ctx - 1) is written by the kernel just before: only after the PDL wait (`newest`).
  uint4 kr[CH];
  auto load_tile = [&](int base, bool newest) {
    const int k = base + tid;
    const bool ok = k < kend && (newest || k != ctx - 1);
    uint4 vr[CH];
    if (ok) {
      const size_t off = row_off(k);
      const uint4* ks = reinterpret_cast<const uint4*>(kc + off);
      const uint4* vs = reinterpret_cast<const uint4*>(vc + off);
#pragma unroll
      for (int c = 0; c < CH; ++c) {  // after the wait: past L1, whatever an earlier step left there
        kr[c] = newest ? __ldcg(ks + c) : __ldg(ks + c);
        vr[c] = newest ? __ldcg(vs + c) : __ldg(vs + c);
      }
    } else {
#pragma unroll
      for (int c = 0; c < CH; ++c) kr[c] = vr[c] = make_uint4(0, 0, 0, 0);
    }
    if (ok || k >= kend) {  // the newest row before the wait is stored after it
#pragma unroll
      for (int c = 0; c < CH; ++c) *reinterpret_cast<uint4*>(sV + tid * VS + c * 8) = vr[c];
    }
  };
  load_tile(kbeg, false);

  GEMV_PROBE(1);
  pdl_wait();
  pdl_trigger();
  GEMV_PROBE(2);
  if (kbeg + tid == ctx - 1) load_tile(kbeg, true);  // the newest key, if it is in the first tile
  for (int i = tid; i < group * CH; i += NT) {  // the group's query rows, as floats
    float qf[8];
    half8_to_float(*reinterpret_cast<const uint4*>(p.q + (static_cast<size_t>(q0) * p.num_heads + kvh * group) * D +
                                                   i * 8), qf);
    float4* dst = reinterpret_cast<float4*>(sQ + i * 8);
    dst[0] = make_float4(qf[0], qf[1], qf[2], qf[3]);
    dst[1] = make_float4(qf[4], qf[5], qf[6], qf[7]);
  }
  __syncthreads();
  GEMV_PROBE(3);

  // P.V ownership: dim pair `dp` of heads hb * HPT .. hb * HPT + HPT - 1.
  const int dp = tid % C::PAIRS, hb = tid / C::PAIRS;
  float acc[HPT][2];
  float m_run[GC], l_run[GC];
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    m_run[g] = -INFINITY;
    l_run[g] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < HPT; ++i) acc[i][0] = acc[i][1] = 0.f;

  for (int base = kbeg; base < kend; base += KT) {
    if (base != kbeg) {
      __syncthreads();  // the previous tile's sV / sP / warp values are read
      load_tile(base, true);
    }
    const bool valid = base + tid < kend;
    float s[GC];
#pragma unroll
    for (int g = 0; g < GC; ++g) s[g] = 0.f;
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      float kf[8];
      half8_to_float(kr[c], kf);
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        if (g < group) {
          const float4 qa = *reinterpret_cast<const float4*>(sQ + g * D + c * 8);
          const float4 qb = *reinterpret_cast<const float4*>(sQ + g * D + c * 8 + 4);
          s[g] = fmaf(qa.x, kf[0], s[g]); s[g] = fmaf(qa.y, kf[1], s[g]);
          s[g] = fmaf(qa.z, kf[2], s[g]); s[g] = fmaf(qa.w, kf[3], s[g]);
          s[g] = fmaf(qb.x, kf[4], s[g]); s[g] = fmaf(qb.y, kf[5], s[g]);
          s[g] = fmaf(qb.z, kf[6], s[g]); s[g] = fmaf(qb.w, kf[7], s[g]);
        }
      }
    }
    // Tile maxima: warp shuffles, then the NW warps' values through shared memory.
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      s[g] = valid ? s[g] * p.scale_log2 : -INFINITY;
      float mx = s[g];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      if (lane == 0) sWM[warp * GC + g] = mx;
    }
    __syncthreads();
    float alpha[GC];
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      float mt = sWM[g];
#pragma unroll
      for (int w = 1; w < NW; ++w) mt = fmaxf(mt, sWM[w * GC + g]);
      const float m_new = fmaxf(m_run[g], mt);
      alpha[g] = m_run[g] == -INFINITY ? 0.f : exp2f(m_run[g] - m_new);
      const float e = m_new == -INFINITY || !valid ? 0.f : exp2f(s[g] - m_new);
      m_run[g] = m_new;
      s[g] = e;
      float sum = e;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      if (lane == 0) sWL[warp * GC + g] = sum;
    }
    if constexpr (GC % 4 == 0) {
#pragma unroll
      for (int g = 0; g < GC; g += 4)
        *reinterpret_cast<float4*>(sP + tid * GC + g) = make_float4(s[g], s[g + 1], s[g + 2], s[g + 3]);
    } else {
#pragma unroll
      for (int g = 0; g < GC; ++g) sP[tid * GC + g] = s[g];
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < NW; ++w) sum += sWL[w * GC + g];  // fixed order: every thread gets the same l
      l_run[g] = l_run[g] * alpha[g] + sum;
    }
#pragma unroll
    for (int i = 0; i < HPT; ++i) {
      const int g = hb * HPT + i;
      float a = 0.f;
#pragma unroll
      for (int gg = 0; gg < GC; ++gg)  // a select, not a dynamic index into registers
        if (gg == g) a = alpha[gg];
      acc[i][0] *= a;
      acc[i][1] *= a;
    }
    const int nk = min(KT, kend - base);
    if (hb * HPT < group) {
#pragma unroll 8
      for (int k = 0; k < nk; ++k) {
        const float2 v = __half22float2(*reinterpret_cast<const __half2*>(sV + k * VS + 2 * dp));
#pragma unroll
        for (int i = 0; i < HPT; ++i) {
          const float pr = sP[k * GC + hb * HPT + i];
          acc[i][0] = fmaf(pr, v.x, acc[i][0]);
          acc[i][1] = fmaf(pr, v.y, acc[i][1]);
        }
      }
    }
  }

  GEMV_PROBE(4);
#pragma unroll
  for (int i = 0; i < HPT; ++i) {
    const int g = hb * HPT + i;
    if (g >= group) continue;
    float L = 0.f, M = 0.f;
#pragma unroll
    for (int gg = 0; gg < GC; ++gg)
      if (gg == g) {
        L = l_run[gg];
        M = m_run[gg];
      }
    const float inv = L > 0.f ? 1.f / L : 0.f;
    const size_t orow = static_cast<size_t>(q0) * p.num_heads + kvh * group + g;
    if (n_active == 1) {
      reinterpret_cast<__half2*>(p.out + orow * D)[dp] = __floats2half2_rn(acc[i][0] * inv, acc[i][1] * inv);
    } else {
      const size_t prow = static_cast<size_t>(split) * p.num_tokens * p.num_heads + orow;
      reinterpret_cast<float2*>(p.part_o + prow * D)[dp] = make_float2(acc[i][0] * inv, acc[i][1] * inv);
      if (dp == 0) reinterpret_cast<float2*>(p.part_ml)[prow] = make_float2(M, L);
    }
  }
  if (n_active > 1) merge_splits<D, NT>(p, blockIdx.x, n_active, 0, group, q0, kvh, group);
  GEMV_PROBE_END(-D, n_active);
}

}  // namespace revolta
