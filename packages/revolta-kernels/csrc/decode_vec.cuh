// Decode attention for few sequences with an fp16 cache: one query token per sequence, GQA group <= 8.
//
// At batch 1 the step waits on this kernel's latency, not its bandwidth (a 600-token Llama-8B context is
// 2.5 MB, well under a microsecond of copy time). paged_decode_kernel (decode.cuh) pays a WMMA tile of 16
// rows for 4 query heads and several barriers per 64-key tile; this kernel uses CUDA cores only (fp32 dot
// products, no tensor cores to wait for) and issues its K/V loads before the PDL wait:
//   * a block owns one (sequence, KV head, context split); thread (key group kg, chunk c) owns 16 bytes
//     (8 dims) of the key rows kg, kg + KP, ... of each tile of KT keys;
//   * the cache rows of every key except the newest one (position ctx - 1, which the rotary kernel just
//     before writes) were written by earlier steps, and the block tables and context lengths by copies or
//     non-PDL kernels earlier on the stream, so they are read before pdl_wait() and their DRAM round trip
//     overlaps the previous kernel; the newest key and the query are read after it;
//   * q.k in fp32 over the 8 dims, summed across the TPK threads of a key row with shuffles; one warp per
//     query head runs the online softmax over the tile in shared memory; P.V accumulates 8 output dims per
//     thread and head; the key groups' outputs are summed in shared memory at the end;
//   * splits write their partials (o / l, max, l) and the last to arrive merges them (merge_splits), as
//     paged_decode_kernel does, so the host's split plan and buffers are shared.
// ROPE = true folds rotary_and_cache_kernel (rotary.cuh) in: the query is rotated from the projection's
// output (DecodeRope) as it is loaded, and the block holding the newest key rotates that token's key,
// writes key and value into the cache slot and uses them from registers. One kernel instead of two per
// attention layer of a decode step.
#pragma once

#include "attention.cuh"
#include "decode_merge.cuh"
#include "rotary.cuh"
#include "weight_load.cuh"

namespace revolta {

// GC: query heads per KV head, rounded up to a power of two (1..8); NT_: threads (128, or 256 for the wide
// variant: twice the key rows per pass, so a tile holds twice the keys at the same work per thread).
template <int D, int GC, int NT_ = 128>
struct VecDecodeCfg {
  static constexpr int NT = NT_;
  static constexpr int TPK = D / 8;  // threads per key row, 16 bytes each
  static constexpr int KP = NT / TPK;  // key rows per pass of the block
  static constexpr int U = (GC >= 8 || D == 64) ? 4 : 8;  // passes per tile: keys a thread holds in flight
  static constexpr int KT = KP * U;  // keys per tile
  static constexpr int SMEM_BYTES = (GC * KT + 4 * GC + KP * GC * D) * 4;
  static_assert(TPK <= 32 && 32 % TPK == 0, "a key row's threads must sit in one warp");
};

// Tag of load_half's two halves of a K/V tile (keys or values).
template <bool KEYS>
struct VecKvHalf {
  static constexpr bool value = KEYS;
};

// Sums each of the V values of a key row's TPK lanes over those lanes (V <= TPK, both powers of two): a
// reduce-scatter, each level sending the half of the values the partner keeps and keeping the other half, then
// plain xor levels once one value is left. V - 1 + log2(TPK / V) shuffles instead of V log2(TPK). Lane c of the row
// returns the sum of value c / (TPK / V); the TPK / V lanes of a value hold the same sum.
template <int TPK, int V>
__device__ __forceinline__ float row_reduce_scatter(float (&v)[V], int c) {
  static_assert(V <= TPK && (V & (V - 1)) == 0, "at most one value per lane, a power of two");
#pragma unroll
  for (int n = V, off = TPK / 2; n > 1; n >>= 1, off >>= 1) {
    const bool upper = (c & off) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = upper ? v[i] : v[i + n / 2];
      const float keep = upper ? v[i + n / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
    }
  }
  float r = v[0];
#pragma unroll
  for (int off = TPK / V / 2; off > 0; off >>= 1) r += __shfl_xor_sync(0xffffffffu, r, off);
  return r;
}

template <int D, int GC, int NT = 128>
__device__ const int decode_vec_smem_bytes = VecDecodeCfg<D, GC, NT>::SMEM_BYTES;

template <int D, int GC, bool ROPE, int NT = 128>
__global__ void __launch_bounds__(NT) paged_decode_vec_kernel(const AttnParams p, const DecodeRope r) {
  using C = VecDecodeCfg<D, GC, NT>;
  constexpr int TPK = C::TPK, KP = C::KP, U = C::U, KT = C::KT;
  // Keys per reduce-scatter of the scores: 2 where 2 x GC values fit a key row's lanes, else 1.
  constexpr int PK = 2 * GC <= TPK ? 2 : 1;
  extern __shared__ __align__(128) unsigned char smem[];  // the alignment decode.cuh declares
  float* sS = reinterpret_cast<float*>(smem);  // [GC][KT] scores, then probabilities
  float* sM = sS + GC * KT;                     // running max (log2 domain), per head
  float* sL = sM + GC;                          // running sum
  float* sAlpha = sL + GC;                      // rescale of the running output for this tile
  float* sO = sAlpha + 2 * GC;                  // [KP][GC][D] per key group outputs (16-byte aligned)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kg = tid / TPK, c = tid % TPK;
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
  const int kbeg = split * slen, kend = min(ctx, kbeg + slen);
  const int* table = p.block_tables + static_cast<size_t>(seq) * p.max_blocks;
  const size_t block_stride = static_cast<size_t>(p.num_kv_heads) * p.block_size * D;
  const size_t head_off = static_cast<size_t>(kvh) * p.block_size * D + c * 8;
  const __half* kc = static_cast<const __half*>(p.k_cache);
  const __half* vc = static_cast<const __half*>(p.v_cache);

  // ROPE: this token's position, cos/sin row and cache slot are inputs from before the step's kernels.
  long long slot = -1;
  // ROPE staging in the output area (unused until the end): the rotated query rows, the newest key
  // (rotated) and value, and this position's cos/sin row.
  __half* sQr = reinterpret_cast<__half*>(sO);  // [GC][D]
  __half* sNk = sQr + GC * D;
  __half* sNv = sNk + D;
  float* sCS = reinterpret_cast<float*>(sNv + D);  // [rot_dim]
  if constexpr (ROPE) {
    const float* cs = r.cos_sin + r.positions[q0] * r.rot_dim;
    slot = r.slots[q0];
    for (int i = tid; i < r.rot_dim; i += C::NT) sCS[i] = cs[i];
  }
  // The newest key (position ctx - 1; after the PDL wait only): read from the cache the previous kernel
  // wrote, or (ROPE) rotated from the projection and written to its cache slot here.
  auto fill_newest = [&](uint4& kv_k, uint4& kv_v) {
    if (ROPE && slot >= 0) {  // staged (rotated) in shared memory after the wait, below
      kv_k = *reinterpret_cast<const uint4*>(sNk + c * 8);
      kv_v = *reinterpret_cast<const uint4*>(sNv + c * 8);
    } else {  // (a padding token, slot -1, is not written: it reads what the cache holds, as the two ops do)
      const size_t off = static_cast<size_t>(table[kv_block_index(p, ctx - 1)]) * block_stride + head_off +
                         static_cast<size_t>(kv_block_offset(p, ctx - 1)) * D;
      kv_k = *reinterpret_cast<const uint4*>(kc + off);
      kv_v = *reinterpret_cast<const uint4*>(vc + off);
    }
  };
  uint4 kr[U], vr[U];
  // Tile [base, base + KT): key base + kg + j * KP into kr[j] (KEYS) or vr[j] (values), zeros past kend; the
  // newest key only when `newest` (after the PDL wait).
  auto load_half = [&](int base, bool newest, auto keys) {
    constexpr bool KEYS = decltype(keys)::value;
    uint4* dst = KEYS ? kr : vr;
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int k = base + kg + j * KP;
      dst[j] = make_uint4(0, 0, 0, 0);
      if (k >= kend) {
      } else if (k == ctx - 1) {
        uint4 other;
        if constexpr (KEYS) {
          if (newest) fill_newest(dst[j], other);
        } else {
          if (newest) fill_newest(other, dst[j]);
        }
      } else {
        const size_t off = static_cast<size_t>(table[kv_block_index(p, k)]) * block_stride + head_off +
                           static_cast<size_t>(kv_block_offset(p, k)) * D;
        dst[j] = load_kv(reinterpret_cast<const uint4*>((KEYS ? kc : vc) + off));
      }
    }
  };
  using Keys = VecKvHalf<true>;
  using Values = VecKvHalf<false>;
  load_half(kbeg, false, Keys{});
  load_half(kbeg, false, Values{});
  if (tid < GC) {
    sM[tid] = -INFINITY;
    sL[tid] = 0.f;
  }

  pdl_wait();
  pdl_trigger();
  if constexpr (ROPE) {  // rotate the query rows and the newest key once per block (rotary.cuh's arithmetic)
    auto rot = [&](const __half* row, int d) -> __half {
      return __float2half_rn(rotate_one(row, sCS, d, r.rot_dim, r.neox != 0));
    };
    __syncthreads();  // sCS
    for (int i = tid; i < group * D; i += C::NT)
      sQr[i] = rot(r.q + q0 * r.q_tok_stride + (kvh * group + i / D) * r.q_head_stride, i % D);
    const bool writes = kend == ctx && slot >= 0;
    if (writes) {
      for (int d = tid; d < D; d += C::NT) {
        sNk[d] = rot(r.k + q0 * r.k_tok_stride + kvh * r.k_head_stride, d);
        sNv[d] = r.v[q0 * r.v_tok_stride + kvh * r.v_head_stride + d];
      }
    }
    __syncthreads();
    if (writes && tid < D / 8) {  // this token's key and value into its cache slot
      const size_t off = ((static_cast<size_t>(slot / p.block_size) * p.num_kv_heads + kvh) * p.block_size +
                          static_cast<size_t>(slot % p.block_size)) * D + tid * 8;
      *reinterpret_cast<uint4*>(const_cast<__half*>(kc) + off) = *reinterpret_cast<const uint4*>(sNk + tid * 8);
      *reinterpret_cast<uint4*>(const_cast<__half*>(vc) + off) = *reinterpret_cast<const uint4*>(sNv + tid * 8);
    }
  }
  if (kend == ctx) {  // the newest key, if this thread's first tile holds it
    const int rr = ctx - 1 - kbeg - kg;
#pragma unroll
    for (int j = 0; j < U; ++j)
      if (rr == j * KP) fill_newest(kr[j], vr[j]);
  }
  float qf[GC][8];
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (g < group) {
      if constexpr (ROPE)
        raw = *reinterpret_cast<const uint4*>(sQr + g * D + c * 8);
      else
        raw = *reinterpret_cast<const uint4*>(p.q + (static_cast<size_t>(q0) * p.num_heads + kvh * group + g) * D +
                                              c * 8);
    }
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      qf[g][2 * i] = f.x;
      qf[g][2 * i + 1] = f.y;
    }
  }
  float o[GC][8];
#pragma unroll
  for (int g = 0; g < GC; ++g)
#pragma unroll
    for (int e = 0; e < 8; ++e) o[g][e] = 0.f;

  // Past the first tile, a tile's keys load as soon as the previous tile's scores are done and its values as soon as
  // the previous tile's P.V is done, so the loads overlap a softmax and a P.V (head_dim 256: 16-key tiles, several
  // per split) instead of waiting at the top of the tile.
  for (int base = kbeg; base < kend; base += KT) {
    // Scores of this thread's keys, PK keys x GC heads at a time summed over the key row's TPK threads
    // (row_reduce_scatter); the first lane of each value's TPK / V writes it.
#pragma unroll
    for (int j0 = 0; j0 < U; j0 += PK) {
      float s[PK * GC];
#pragma unroll
      for (int jj = 0; jj < PK; ++jj) {
        const uint4 kw = kr[j0 + jj];
        const uint32_t w[4] = {kw.x, kw.y, kw.z, kw.w};
        float kf[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
          kf[2 * i] = f.x;
          kf[2 * i + 1] = f.y;
        }
#pragma unroll
        for (int g = 0; g < GC; ++g) {
          float a = 0.f;
#pragma unroll
          for (int e = 0; e < 8; ++e) a = fmaf(qf[g][e], kf[e], a);
          s[jj * GC + g] = a;
        }
      }
      const float sum = row_reduce_scatter<TPK, PK * GC>(s, c);
      constexpr int DUP = TPK / (PK * GC);
      if (c % DUP == 0) {
        const int idx = c / DUP, j = j0 + idx / GC, g = idx % GC;
        const int k = base + kg + j * KP;
        sS[g * KT + kg + j * KP] = k < kend ? sum * p.scale_log2 : -INFINITY;
      }
    }
    if (base + KT < kend) load_half(base + KT, true, Keys{});
    __syncthreads();
    // Online softmax, one warp per head.
    for (int g = warp; g < group; g += C::NT / 32) {
      float mx = -INFINITY;
      for (int i = lane; i < KT; i += 32) mx = fmaxf(mx, sS[g * KT + i]);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_old = sM[g], m_new = fmaxf(m_old, mx);
      float sum = 0.f;
      for (int i = lane; i < KT; i += 32) {
        const float e = m_new == -INFINITY ? 0.f : exp2f(sS[g * KT + i] - m_new);
        sS[g * KT + i] = e;
        sum += e;
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      if (lane == 0) {
        const float alpha = m_old == -INFINITY ? 0.f : exp2f(m_old - m_new);
        sAlpha[g] = alpha;
        sL[g] = sL[g] * alpha + sum;
        sM[g] = m_new;
      }
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      const float a = g < group ? sAlpha[g] : 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) o[g][e] *= a;
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const uint32_t w[4] = {vr[j].x, vr[j].y, vr[j].z, vr[j].w};
      float vf[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        vf[2 * i] = f.x;
        vf[2 * i + 1] = f.y;
      }
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        const float pr = g < group ? sS[g * KT + kg + j * KP] : 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) o[g][e] = fmaf(pr, vf[e], o[g][e]);
      }
    }
    if (base + KT < kend) load_half(base + KT, true, Values{});
    __syncthreads();  // sS and sAlpha are rewritten by the next tile
  }

#pragma unroll
  for (int g = 0; g < GC; ++g) {
    float4* dst = reinterpret_cast<float4*>(sO + (kg * GC + g) * D + c * 8);
    dst[0] = make_float4(o[g][0], o[g][1], o[g][2], o[g][3]);
    dst[1] = make_float4(o[g][4], o[g][5], o[g][6], o[g][7]);
  }
  __syncthreads();
  for (int i = tid; i < group * (D / 4); i += C::NT) {
    const int g = i / (D / 4), d = (i % (D / 4)) * 4;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int kk = 0; kk < KP; ++kk) {
      const float4 v = *reinterpret_cast<const float4*>(sO + (kk * GC + g) * D + d);
      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
    const float L = sL[g], inv = L > 0.f ? 1.f / L : 0.f;
    acc.x *= inv; acc.y *= inv; acc.z *= inv; acc.w *= inv;
    const size_t orow = static_cast<size_t>(q0) * p.num_heads + kvh * group + g;
    if (n_active == 1) {
      __half2* dst = reinterpret_cast<__half2*>(p.out + orow * D + d);
      dst[0] = __floats2half2_rn(acc.x, acc.y);
      dst[1] = __floats2half2_rn(acc.z, acc.w);
    } else {
      const size_t prow = static_cast<size_t>(split) * p.num_tokens * p.num_heads + orow;
      *reinterpret_cast<float4*>(p.part_o + prow * D + d) = acc;
      if (d == 0) reinterpret_cast<float2*>(p.part_ml)[prow] = make_float2(sM[g], L);
    }
  }
  if (n_active > 1) merge_splits<D, C::NT>(p, blockIdx.x, n_active, 0, group, q0, kvh, group, sS, C::SMEM_BYTES / 4);
}

}  // namespace revolta
