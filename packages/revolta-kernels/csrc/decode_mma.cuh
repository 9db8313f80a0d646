// Paged decode for one-byte KV caches (int8, fp8 e4m3/e5m2) with the cache bytes dequantised straight
// into tensor-core fragments: no shared-memory staging and no block-wide barrier until the final merge.
//
// Needs the fragment layout of mma_layout.cuh (the host checks it; elsewhere decode.cuh runs). A block
// owns (sequence, KV head, 16-row tile, context split); rows pack (query token, query head of the group)
// as in decode.cuh. Each warp walks its own 16-key steps (w, w + NW, ...) with a private online softmax
// and output, keeping STAGES steps of loads in flight, so warps never wait for one another; they merge
// through shared memory once at the end. One-byte KV is bound by latency, not by bytes: this takes the
// shared-memory round trip and the four barriers per tile of the generic kernel off the critical path.
//
// Per 16-key step, lane (g = lane / 4, t = lane % 4) loads
//  - K: bytes [64c + 16t, 64c + 16t + 16) of keys g and g + 8 (c < D / 64). The QK^T reduction runs over
//    the head dimensions in a permuted order: MMA step kk = 4c + j takes dims 64c + 16t + 4j + {0, 1} as
//    its k = 2t, 2t + 1 and + {2, 3} as k = 2t + 8, 2t + 9; the query fragments use the same order.
//  - V: bytes [(D/8) g, (D/8) g + D/8) of keys 2t, 2t + 1, 2t + 8, 2t + 9, the keys whose scores this
//    lane's S accumulator holds, so P goes from accumulator to matrix_a fragment in place. Output column
//    16 jn + g (+ 8) then comes from V byte 2 jn (+ 1) of that slice: O is accumulated in a permuted
//    column order that the final store undoes.
//  - int8: the K scale multiplies S in fp32 (K bytes convert to fp16 exactly); the V scale multiplies V
//    in fp16, as in the generic kernel.
// PREFETCH: besides the STAGES steps loaded into registers, the warp asks L2 for the step after those
// (prefetch.global.L2, no registers held), so the register loads mostly hit L2.
#pragma once

#include <mma.h>
#include "attention.cuh"
#include "decode_merge.cuh"
#include "mma_layout.cuh"

namespace revolta {

template <int D, int NW, bool ROWS8>
struct DecodeMmaCfg {
  static_assert(D == 64 || D == 128, "frag decode: head_dim 64 or 128");
  static constexpr int NT = 32 * NW;
  static constexpr int KCH = D / 64;  // 16-byte K chunks per key per lane
  static constexpr int VW = D / 32;   // 32-bit V words per key per lane
  static constexpr int NJ = D / 16;   // output fragments (and QK^T k-steps)
  static constexpr int NR = ROWS8 ? 8 : 16;  // rows that can be real
  static constexpr int LDO = D + 4;
  static constexpr int O_BYTES = NW * NR * LDO * 4;
  static constexpr int SMEM_BYTES = O_BYTES + 2 * NW * 16 * 4;
};

template <int D, int NW, bool ROWS8>
__device__ const int decode_mma_smem_bytes = DecodeMmaCfg<D, NW, ROWS8>::SMEM_BYTES;

template <int D, int KIND>
struct DecodeFragStage {
  uint4 k[2][D / 64];      // keys g, g + 8
  uint32_t v[4][D / 32];   // keys 2t, 2t + 1, 2t + 8, 2t + 9
  float2 ks[2];            // int8 scales of keys (2t, 2t + 1), (2t + 8, 2t + 9): K in fp32, V in fp16
  __half2 vs[2];
};

template <int W>
__device__ __forceinline__ void ldg_words(uint32_t (&w)[W], const unsigned char* ptr) {
  if constexpr (W == 2) {
    const uint2 x = __ldg(reinterpret_cast<const uint2*>(ptr));
    w[0] = x.x; w[1] = x.y;
  } else {
    static_assert(W == 4, "2 or 4 words");
    const uint4 x = __ldg(reinterpret_cast<const uint4*>(ptr));
    w[0] = x.x; w[1] = x.y; w[2] = x.z; w[3] = x.w;
  }
}

__device__ __forceinline__ uint32_t u4_word(const uint4& x, int j) {
  return j == 0 ? x.x : j == 1 ? x.y : j == 2 ? x.z : x.w;
}

__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}

template <int D, int KIND, int NW, int STAGES, int MINB, bool ROWS8, bool PREFETCH>
__global__ void __launch_bounds__(32 * NW, MINB)
paged_decode_mma_kernel(const AttnParams p) {
  using namespace nvcuda;
  using C = DecodeMmaCfg<D, NW, ROWS8>;
  using Stage = DecodeFragStage<D, KIND>;
  constexpr int KCH = C::KCH, VW = C::VW, NJ = C::NJ;
  extern __shared__ __align__(128) unsigned char smem[];
  float* sO = reinterpret_cast<float*>(smem);
  float* sM = reinterpret_cast<float*>(smem + C::O_BYTES);
  float* sL = sM + NW * 16;

  // Launched with PDL (pdl.cuh): q, the cache and the metadata come from earlier kernels / copies.
  pdl_wait();
  pdl_trigger();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int seq = blockIdx.x / p.num_kv_heads, kvh = blockIdx.x % p.num_kv_heads;
  const int split = blockIdx.z;
  const int group = p.num_heads / p.num_kv_heads;
  const int q0 = p.query_start_loc[seq];
  const int qlen = p.query_start_loc[seq + 1] - q0;
  const int R = qlen * group;
  const int ctx = p.context_lens[seq];  // before the exit: loaded together with query_start_loc
  const int row0 = blockIdx.y * 16;
  if (row0 >= R) return;
  const int last_row = min(R, row0 + 16) - 1;
  const int kend_all = ctx - qlen + last_row / group + 1;
  // Splits of whole rounds of the warps' 16-key steps (split_len, attention.cuh), or fixed chunks.
  const int slen = p.split_tokens > 0 ? p.split_tokens : split_len<16 * NW>(kend_all, p.num_splits);
  const int n_active = max(1, (kend_all + slen - 1) / slen);  // 1: a row tile with no keys writes zeros
  if (split >= n_active) return;
  const int kbeg = split * slen;
  const int kend = min(kend_all, kbeg + slen);

  // Query rows g and g + 8 of the tile, in the permuted dimension order (see the header).
  const int grA = row0 + g, grB = row0 + g + 8;
  const int posA = grA < R ? ctx - qlen + grA / group : -1;
  const int posB = grB < R ? ctx - qlen + grB / group : -1;
  uint32_t qa[D / 8], qb[ROWS8 ? 1 : D / 8];
  {
    const size_t rowA = static_cast<size_t>(q0 + grA / group) * p.num_heads + kvh * group + grA % group;
    const size_t rowB = static_cast<size_t>(q0 + grB / group) * p.num_heads + kvh * group + grB % group;
#pragma unroll
    for (int c = 0; c < KCH; ++c)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint4 x = make_uint4(0, 0, 0, 0);
        if (grA < R) x = *reinterpret_cast<const uint4*>(p.q + rowA * D + 64 * c + 16 * t + 8 * h);
        qa[8 * c + 4 * h] = x.x; qa[8 * c + 4 * h + 1] = x.y; qa[8 * c + 4 * h + 2] = x.z; qa[8 * c + 4 * h + 3] = x.w;
        if constexpr (!ROWS8) {
          uint4 y = make_uint4(0, 0, 0, 0);
          if (grB < R) y = *reinterpret_cast<const uint4*>(p.q + rowB * D + 64 * c + 16 * t + 8 * h);
          qb[8 * c + 4 * h] = y.x; qb[8 * c + 4 * h + 1] = y.y; qb[8 * c + 4 * h + 2] = y.z; qb[8 * c + 4 * h + 3] = y.w;
        }
      }
  }

  FragAcc o[NJ];
#pragma unroll
  for (int j = 0; j < NJ; ++j) wmma::fill_fragment(o[j], 0.f);
  float mA = -INFINITY, mB = -INFINITY, lA = 0.f, lB = 0.f;
  const float qk_scale = p.scale_log2 * kv_unit<KIND>();

  const unsigned char* kc = static_cast<const unsigned char*>(p.k_cache);
  const unsigned char* vc = static_cast<const unsigned char*>(p.v_cache);
  const int* btab = p.block_tables + static_cast<size_t>(seq) * p.max_blocks;
  const size_t blk_stride = static_cast<size_t>(p.num_kv_heads) * p.block_size;
  const int head_tok = kvh * p.block_size, bmask = p.block_size - 1;
  const int nsteps = kend > kbeg ? (kend - kbeg + 15) / 16 : 0;
  const int nloc = nsteps > warp ? (nsteps - warp + NW - 1) / NW : 0;
  // A 16-key step never crosses a page: steps start at multiples of 16 and block_size >= 16.
  auto step_key = [&](int i) { return kbeg + (warp + i * NW) * 16; };
  auto page_of = [&](int i) { return i < nloc ? __ldg(btab + (step_key(i) >> p.block_shift)) : 0; };

  auto issue = [&](Stage& st, int i, int page) {
    const int k0 = step_key(i);
    const size_t tok0 = static_cast<size_t>(page) * blk_stride + head_tok + (k0 & bmask);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const unsigned char* kp = kc + (tok0 + g + 8 * h) * D + 16 * t;
#pragma unroll
      for (int c = 0; c < KCH; ++c) st.k[h][c] = __ldg(reinterpret_cast<const uint4*>(kp + 64 * c));
    }
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const int key = 2 * t + (h & 1) + 8 * (h >> 1);
      // V of keys past the end must be zero (0 * NaN would poison the output); K needs no such care,
      // its scores are masked by selection.
      if (k0 + key < kend) {
        ldg_words<VW>(st.v[h], vc + (tok0 + key) * D + (D / 8) * g);
      } else {
#pragma unroll
        for (int w = 0; w < VW; ++w) st.v[h][w] = 0u;
      }
    }
    if (KIND == KV_I8) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const size_t tk = tok0 + 2 * t + 8 * h;
        st.ks[h] = __ldg(reinterpret_cast<const float2*>(p.k_scales + tk));
        const float2 vs = __ldg(reinterpret_cast<const float2*>(p.v_scales + tk));
        const int key = k0 + 2 * t + 8 * h;
        st.vs[h] = __floats2half2_rn(key < kend ? vs.x : 0.f, key + 1 < kend ? vs.y : 0.f);
      }
    }
  };

  // L2 prefetch of a whole step: K and V are 16 * D contiguous bytes each (one page, one head).
  auto prefetch = [&](int i, int page) {
    const int k0 = step_key(i);
    const size_t tok0 = static_cast<size_t>(page) * blk_stride + head_tok + (k0 & bmask);
    constexpr int LINES = 16 * D / 128;  // 128-byte lines per tensor
    if (lane < 2 * LINES) prefetch_l2((lane < LINES ? kc : vc) + tok0 * D + 128 * (lane % LINES));
    if (KIND == KV_I8 && lane >= 30) prefetch_l2((lane == 30 ? p.k_scales : p.v_scales) + tok0);
  };

  auto compute = [&](const Stage& st, int i) {
    const int k0 = step_key(i);
    // S = Q K^T for the 16 keys of the step (rows x keys), K dequantised into matrix_b fragments.
    FragAcc s2[2];  // two chains of dependent MMAs instead of one
    wmma::fill_fragment(s2[0], 0.f);
    wmma::fill_fragment(s2[1], 0.f);
#pragma unroll
    for (int c = 0; c < KCH; ++c)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        FragA a;
        frag_set_words(a, qa[8 * c + 2 * j], ROWS8 ? 0u : qb[ROWS8 ? 0 : 8 * c + 2 * j], qa[8 * c + 2 * j + 1],
                       ROWS8 ? 0u : qb[ROWS8 ? 0 : 8 * c + 2 * j + 1]);
        uint32_t bw[4];
        dequant_word<KIND>(u4_word(st.k[0][c], j), bw[0], bw[1]);
        dequant_word<KIND>(u4_word(st.k[1][c], j), bw[2], bw[3]);
        FragBCol b;
        frag_set_words(b, bw[0], bw[1], bw[2], bw[3]);
        wmma::mma_sync(s2[j & 1], a, b, s2[j & 1]);
      }

    // Online softmax in registers. Element i holds row g + 8 ((i >> 1) & 1), key 2t + (i & 1) + 8 (i >> 2).
    float sc[4] = {1.f, 1.f, 1.f, 1.f};
    if (KIND == KV_I8) sc[0] = st.ks[0].x, sc[1] = st.ks[0].y, sc[2] = st.ks[1].x, sc[3] = st.ks[1].y;
    // Keys k0 + c with c < lim are visible to the row (inside the split and causal).
    const int limA = min(kend, posA + 1) - k0, limB = min(kend, posB + 1) - k0;
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int c = 2 * t + (e & 1) + 8 * (e >> 2);
      const float x = s2[0].x[e] + s2[1].x[e];
      v[e] = c < ((e >> 1) & 1 ? limB : limA) ? x * (qk_scale * sc[(e & 1) + 2 * (e >> 2)]) : -INFINITY;
    }
    float mx = fmaxf(fmaxf(v[0], v[1]), fmaxf(v[4], v[5]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mA_new = fmaxf(mA, mx);
    const float alphaA = mA_new == -INFINITY ? 1.f : fast_exp2(mA - mA_new);
    float alphaB = 1.f, mB_new = mB;
    if constexpr (!ROWS8) {
      float my = fmaxf(fmaxf(v[2], v[3]), fmaxf(v[6], v[7]));
      my = fmaxf(my, __shfl_xor_sync(0xffffffffu, my, 1));
      my = fmaxf(my, __shfl_xor_sync(0xffffffffu, my, 2));
      mB_new = fmaxf(mB, my);
      alphaB = mB_new == -INFINITY ? 1.f : fast_exp2(mB - mB_new);
    }
    // exp2(-inf - m) is +0 for finite m; a row with nothing visible yet subtracts 0 instead of -inf.
    const float subA = mA_new == -INFINITY ? 0.f : mA_new, subB = mB_new == -INFINITY ? 0.f : mB_new;
    float pr[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const bool rowB = (e >> 1) & 1;
      pr[e] = ROWS8 && rowB ? 0.f : fast_exp2(v[e] - (rowB ? subB : subA));
    }
    lA = lA * alphaA + (pr[0] + pr[1] + pr[4] + pr[5]);
    mA = mA_new;
    if constexpr (!ROWS8) {
      lB = lB * alphaB + (pr[2] + pr[3] + pr[6] + pr[7]);
      mB = mB_new;
    }
    if (__any_sync(0xffffffffu, alphaA != 1.f || alphaB != 1.f)) {
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 8; ++e) o[j].x[e] *= (e >> 1) & 1 ? alphaB : alphaA;
    }
    FragA pa;
    frag_set_words(pa, pack_half2(pr[0], pr[1]), ROWS8 ? 0u : pack_half2(pr[2], pr[3]), pack_half2(pr[4], pr[5]),
                   ROWS8 ? 0u : pack_half2(pr[6], pr[7]));

    // O += P V: V bytes of keys (2t, 2t+1) and (2t+8, 2t+9) interleaved pairwise into matrix_b words.
#pragma unroll
    for (int m = 0; m < VW; ++m) {
      uint32_t w01[2] = {__byte_perm(st.v[0][m], st.v[1][m], 0x5140), __byte_perm(st.v[0][m], st.v[1][m], 0x7362)};
      uint32_t w89[2] = {__byte_perm(st.v[2][m], st.v[3][m], 0x5140), __byte_perm(st.v[2][m], st.v[3][m], 0x7362)};
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // output fragment jn = 2m + h
        uint32_t bw[4];
        dequant_word<KIND>(w01[h], bw[0], bw[2]);
        dequant_word<KIND>(w89[h], bw[1], bw[3]);
        if (KIND == KV_I8) {
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            __half2 x = __hmul2(*reinterpret_cast<__half2*>(&bw[w]), st.vs[w & 1]);
            bw[w] = *reinterpret_cast<uint32_t*>(&x);
          }
        }
        FragBRow b;
        frag_set_words(b, bw[0], bw[1], bw[2], bw[3]);
        wmma::mma_sync(o[2 * m + h], pa, b, o[2 * m + h]);
      }
    }
  };

  // page_next[s]: page of the step loaded next into stage s, read one round earlier; page_far[s]: the
  // step after that (prefetched into L2 when it is read).
  Stage st[STAGES];
  int page_next[STAGES], page_far[STAGES];
#pragma unroll
  for (int s = 0; s < STAGES; ++s)
    if (s < nloc) issue(st[s], s, page_of(s));
#pragma unroll
  for (int s = 0; s < STAGES; ++s) {
    page_next[s] = page_of(s + STAGES);
    if (PREFETCH) page_far[s] = page_of(s + 2 * STAGES);
  }
#pragma unroll
  for (int s = 0; s < STAGES; ++s)
    if (PREFETCH && s + STAGES < nloc) prefetch(s + STAGES, page_next[s]);
  for (int base = 0; base < nloc; base += STAGES) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      const int i = base + s;
      if (i < nloc) {
        compute(st[s], i);
        if (i + STAGES < nloc) {
          issue(st[s], i + STAGES, page_next[s]);
          if (PREFETCH) {
            if (i + 2 * STAGES < nloc) prefetch(i + 2 * STAGES, page_far[s]);
            page_next[s] = page_far[s];
            page_far[s] = page_of(i + 3 * STAGES);
          } else {
            page_next[s] = page_of(i + 2 * STAGES);
          }
        }
      }
    }
  }

  // Merge the warps: lanes of a quad hold partial sums of the same rows.
  lA += __shfl_xor_sync(0xffffffffu, lA, 1);
  lA += __shfl_xor_sync(0xffffffffu, lA, 2);
  lB += __shfl_xor_sync(0xffffffffu, lB, 1);
  lB += __shfl_xor_sync(0xffffffffu, lB, 2);
  if (t == 0) {
    sM[warp * 16 + g] = mA;
    sL[warp * 16 + g] = lA;
    sM[warp * 16 + g + 8] = mB;
    sL[warp * 16 + g + 8] = lB;
  }
  float* myO = sO + warp * C::NR * C::LDO;
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int row = g + 8 * ((e >> 1) & 1);
      if (ROWS8 && row >= 8) continue;
      myO[row * C::LDO + (D / 8) * (2 * t + (e & 1)) + 2 * j + (e >> 2)] = o[j].x[e];  // undo the V permutation
    }
  __syncthreads();
  for (int idx = tid; idx < C::NR * (D / 4); idx += C::NT) {
    const int r = idx / (D / 4), d = (idx % (D / 4)) * 4;
    const int gr = row0 + r;
    if (gr >= R) continue;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) M = fmaxf(M, sM[w * 16 + r]);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    float L = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      const float mw = sM[w * 16 + r];
      const float wt = mw == -INFINITY ? 0.f : fast_exp2(mw - M);
      const float4 x = *reinterpret_cast<const float4*>(sO + (w * C::NR + r) * C::LDO + d);
      acc.x += wt * x.x; acc.y += wt * x.y; acc.z += wt * x.z; acc.w += wt * x.w;
      L += wt * sL[w * 16 + r];
    }
    const float inv = L > 0.f ? kv_unit<KIND>() / L : 0.f;
    acc.x *= inv; acc.y *= inv; acc.z *= inv; acc.w *= inv;
    const int orow = (q0 + gr / group) * p.num_heads + kvh * group + gr % group;
    if (n_active == 1) {
      __half2* dst = reinterpret_cast<__half2*>(p.out + static_cast<size_t>(orow) * D + d);
      dst[0] = __floats2half2_rn(acc.x, acc.y);
      dst[1] = __floats2half2_rn(acc.z, acc.w);
    } else {
      const size_t prow = static_cast<size_t>(split) * p.num_tokens * p.num_heads + orow;
      *reinterpret_cast<float4*>(p.part_o + prow * D + d) = acc;
      if (d == 0) reinterpret_cast<float2*>(p.part_ml)[prow] = make_float2(M, L);
    }
  }
  if (n_active > 1)
    merge_splits<D, C::NT>(p, blockIdx.x * gridDim.y + blockIdx.y, n_active, row0, last_row - row0 + 1, q0, kvh,
                           group, reinterpret_cast<float*>(smem), C::SMEM_BYTES / 4);
}

}  // namespace revolta
