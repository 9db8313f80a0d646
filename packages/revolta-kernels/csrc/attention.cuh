// Paged attention on tensor cores through WMMA 16x16x16 (fp16 operands, fp32 accumulate): the only
// matrix instruction family sm_70 has, and portable to every later arch.
//
// One kernel serves decode and prefill. A thread block owns one (sequence, KV head) pair, a tile of
// "rows" and one split of the context. Rows pack (query token, query head of the KV head's group), so a
// KV tile read from memory is shared by every query head that uses it (GQA/MQA read KV once). Warps are
// arranged WM x WN: WM warps split the rows (prefill: 4 x 16 rows), WN warps split the keys of a tile
// (decode: 1 x 16 rows, 4 warps over the keys, merged at the end). Each split writes a partial result
// (normalised output, running max and sum) that attn_reduce_kernel merges.
//
// Cache layout: [num_blocks, num_kv_heads, block_size, head_dim]; int8 has float32 scales
// [num_blocks, num_kv_heads, block_size]; fp8 is storage only. KV is dequantised to fp16 while being
// staged into shared memory.
#pragma once

#include <mma.h>
#include "common.cuh"

namespace revolta {

enum KvKind { KV_F16 = 0, KV_I8 = 1, KV_E4M3 = 2, KV_E5M2 = 3 };

struct AttnParams {
  const __half* q;             // [T, H, D]
  __half* out;                 // [T, H, D] (used when num_splits == 1)
  const void* k_cache;         // [NB, Hkv, bs, D]
  const void* v_cache;
  const float* k_scales;       // [NB, Hkv, bs] (int8 only)
  const float* v_scales;
  const int* block_tables;     // [S, max_blocks]
  const int* context_lens;     // [S]
  const int* query_start_loc;  // [S + 1]
  float* part_o;               // [num_splits, T, H, D] (split mode)
  float* part_ml;              // [num_splits, T, H, 2]: max (log2 domain), sum
  int num_tokens, num_heads, num_kv_heads, block_size, max_blocks;
  int split_tokens, num_splits;
  float scale_log2;            // softmax scale * log2(e)
  int block_shift;             // log2(block_size); block_size must be a power of two
};

__device__ __forceinline__ int kv_block_index(const AttnParams& p, int kp) { return kp >> p.block_shift; }
__device__ __forceinline__ int kv_block_offset(const AttnParams& p, int kp) { return kp & (p.block_size - 1); }

template <int D, int KIND, int WM, int WN, int BN>
struct AttnCfg {
  static constexpr int NT = 32 * WM * WN;
  static constexpr int BM = 16 * WM;
  static constexpr int BNW = BN / WN;
  static constexpr int LDQ = D + 8;    // halves; padding staggers banks, keeps 32-byte alignment
  static constexpr int LDK = D + 8;
  static constexpr int LDS = BNW + 4;  // floats
  static constexpr int LDP = BNW + 8;  // halves
  static constexpr int LDO = D + 4;    // floats
  static constexpr int ESZ = KIND == KV_F16 ? 2 : 1;
  static constexpr int EPC = 16 / ESZ;           // cache elements per 16-byte chunk
  static constexpr int CPR = D / EPC;            // chunks per token row
  static constexpr int NCH = BN * CPR / NT;      // chunks per thread per tile, for K and for V
  static constexpr int Q_BYTES = BM * LDQ * 2;
  static constexpr int KV_BYTES = 2 * BN * LDK * 2;
  static constexpr int S_BYTES = WM * WN * 16 * LDS * 4;
  static constexpr int P_BYTES = WM * WN * 16 * LDP * 2;
  static constexpr int MAIN_BYTES = Q_BYTES + KV_BYTES + S_BYTES + P_BYTES;
  static constexpr int O_BYTES = WM * WN * 16 * LDO * 4;  // merge buffer, reuses the area above
  static constexpr int BIG_BYTES = MAIN_BYTES > O_BYTES ? MAIN_BYTES : O_BYTES;
  // small arrays: alpha[W*16], m[W*16], l[W*16], rowM[BM], rowL[BM], rowPos[BM], rowOut[BM]
  static constexpr int SMEM_BYTES = BIG_BYTES + (3 * WM * WN * 16 + 4 * BM) * 4;
  static_assert(BNW % 16 == 0, "each warp needs whole 16-key fragments");
  static_assert((BN * CPR) % NT == 0, "tile chunks must divide among threads");
  static_assert(D % 16 == 0 && D <= 256, "head_dim must be a multiple of 16, at most 256");
};

// Exposed for tools/check_sm70.py, which reads the dynamic shared memory of each instantiation.
template <int D, int KIND, int WM, int WN, int BN>
__device__ const int attn_smem_bytes = AttnCfg<D, KIND, WM, WN, BN>::SMEM_BYTES;

// Cache values are staged in fp16 divided by this power of two (exact); the kernels multiply it back
// into the softmax scale (K) and the output (V). e4m3 lands 8 binades low when its bits are placed in an
// fp16, and undoing that per element would cost a multiply per value.
template <int KIND>
__device__ __forceinline__ constexpr float kv_unit() { return KIND == KV_E4M3 ? 256.f : 1.f; }

// Dequantise one 16-byte chunk of cache elements into fp16 shared memory with byte permutes:
//   int8: 0x64uu as fp16 is 1024 + u, so (b ^ 0x80) placed under 0x64 minus 1152 is b, exactly;
//   e5m2: the byte is the top half of an fp16; e4m3: the same shifted right by one, sign kept.
template <int KIND>
__device__ __forceinline__ void store_chunk(__half* dst, uint4 c, float scale) {
  if (KIND == KV_F16) {
    *reinterpret_cast<uint4*>(dst) = c;
  } else {
    const uint32_t w[4] = {c.x, c.y, c.z, c.w};
    uint32_t h[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (KIND == KV_I8) {
        const uint32_t u = w[i] ^ 0x80808080u;
        h[2 * i] = __byte_perm(u, 0x64646464u, 0x5140);
        h[2 * i + 1] = __byte_perm(u, 0x64646464u, 0x7362);
      } else {
        const uint32_t lo = __byte_perm(w[i], 0u, 0x1404), hi = __byte_perm(w[i], 0u, 0x3424);
        if (KIND == KV_E4M3) {
          h[2 * i] = ((lo >> 1) & 0x3fff3fffu) | (lo & 0x80008000u);
          h[2 * i + 1] = ((hi >> 1) & 0x3fff3fffu) | (hi & 0x80008000u);
        } else {
          h[2 * i] = lo;
          h[2 * i + 1] = hi;
        }
      }
    }
    if (KIND == KV_I8) {
      const __half2 bias = __float2half2_rn(1152.f), s2 = __float2half2_rn(scale);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        __half2 v = __hsub2(*reinterpret_cast<__half2*>(&h[i]), bias);
        v = __hmul2(v, s2);
        h[i] = *reinterpret_cast<uint32_t*>(&v);
      }
    }
    reinterpret_cast<uint4*>(dst)[0] = make_uint4(h[0], h[1], h[2], h[3]);
    reinterpret_cast<uint4*>(dst)[1] = make_uint4(h[4], h[5], h[6], h[7]);
  }
}

template <int D, int KIND, int WM, int WN, int BN>
__global__ void __launch_bounds__(32 * WM * WN)
paged_attention_kernel(const AttnParams p) {
  using namespace nvcuda;
  using C = AttnCfg<D, KIND, WM, WN, BN>;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* sQ = reinterpret_cast<__half*>(smem);
  __half* sK = reinterpret_cast<__half*>(smem + C::Q_BYTES);
  __half* sV = sK + BN * C::LDK;
  float* sS_all = reinterpret_cast<float*>(smem + C::Q_BYTES + C::KV_BYTES);
  __half* sP_all = reinterpret_cast<__half*>(smem + C::Q_BYTES + C::KV_BYTES + C::S_BYTES);
  float* sAlpha_all = reinterpret_cast<float*>(smem + C::BIG_BYTES);
  float* sM = sAlpha_all + WM * WN * 16;
  float* sL = sM + WM * WN * 16;
  float* sRowM = sL + WM * WN * 16;
  float* sRowL = sRowM + C::BM;
  int* sRowPos = reinterpret_cast<int*>(sRowL + C::BM);
  int* sRowOut = sRowPos + C::BM;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % WM, wn = warp / WM;
  const int seq = blockIdx.x / p.num_kv_heads, kvh = blockIdx.x % p.num_kv_heads;
  const int tile = gridDim.y - 1 - blockIdx.y;  // longest causal tiles first
  const int split = blockIdx.z;
  const int group = p.num_heads / p.num_kv_heads;
  const int q0 = p.query_start_loc[seq];
  const int qlen = p.query_start_loc[seq + 1] - q0;
  const int R = qlen * group;
  const int row0 = tile * C::BM;
  if (row0 >= R) return;
  const int ctx = p.context_lens[seq];
  const int last_row = min(R, row0 + C::BM) - 1;
  const int kend_all = ctx - qlen + last_row / group + 1;
  const int kbeg = split * p.split_tokens;
  const int kend = min(kend_all, kbeg + p.split_tokens);

  for (int r = tid; r < C::BM; r += C::NT) {
    const int gr = row0 + r;
    const bool ok = gr < R;
    const int t = gr / group, j = gr % group;
    sRowPos[r] = ok ? ctx - qlen + t : -1;
    sRowOut[r] = ok ? (q0 + t) * p.num_heads + kvh * group + j : -1;
  }
  for (int i = tid; i < C::BM * (D / 8); i += C::NT) {
    const int r = i / (D / 8), c = i % (D / 8);
    const int gr = row0 + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (gr < R) {
      const int t = gr / group, j = gr % group;
      const size_t row = static_cast<size_t>(q0 + t) * p.num_heads + kvh * group + j;
      v = *reinterpret_cast<const uint4*>(p.q + row * D + c * 8);
    }
    *reinterpret_cast<uint4*>(sQ + r * C::LDQ + c * 8) = v;
  }

  float* sS = sS_all + warp * 16 * C::LDS;
  __half* sP = sP_all + warp * 16 * C::LDP;
  float* sAlpha = sAlpha_all + warp * 16;

  // Which row each accumulator element belongs to is unspecified by WMMA; learn it once by loading a
  // matrix whose entries are their own row numbers.
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> rowmap;
  for (int i = lane; i < 256; i += 32) sS[(i / 16) * C::LDS + (i % 16)] = static_cast<float>(i / 16);
  __syncwarp();
  wmma::load_matrix_sync(rowmap, sS, C::LDS, wmma::mem_row_major);
  int rowOf[decltype(rowmap)::num_elements];
#pragma unroll
  for (int i = 0; i < decltype(rowmap)::num_elements; ++i) rowOf[i] = static_cast<int>(rowmap.x[i]);
  __syncwarp();

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> o[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(o[n], 0.f);

  const int sr = lane >> 1, sh = lane & 1;
  const float qk_scale = p.scale_log2 * kv_unit<KIND>();
  float m_run = -INFINITY, l_run = 0.f;
  __syncthreads();
  const int mypos = sRowPos[wm * 16 + sr];

  const unsigned char* kc = static_cast<const unsigned char*>(p.k_cache);
  const unsigned char* vc = static_cast<const unsigned char*>(p.v_cache);
  const int* btab = p.block_tables + static_cast<size_t>(seq) * p.max_blocks;
  uint4 stK[C::NCH], stV[C::NCH];
  float scK[C::NCH], scV[C::NCH];

  auto load_tile = [&](int k0) {
#pragma unroll
    for (int n = 0; n < C::NCH; ++n) {
      const int i = tid + n * C::NT;
      const int tk = i / C::CPR, c = i % C::CPR;
      const int kp = k0 + tk;
      stK[n] = make_uint4(0, 0, 0, 0);
      stV[n] = make_uint4(0, 0, 0, 0);
      scK[n] = 0.f;
      scV[n] = 0.f;
      if (kp < kend) {
        const int blk = btab[kv_block_index(p, kp)];
        const size_t tok = (static_cast<size_t>(blk) * p.num_kv_heads + kvh) * p.block_size + kv_block_offset(p, kp);
        const size_t off = (tok * D + c * C::EPC) * C::ESZ;
        stK[n] = __ldg(reinterpret_cast<const uint4*>(kc + off));
        stV[n] = __ldg(reinterpret_cast<const uint4*>(vc + off));
        if (KIND == KV_I8) {
          scK[n] = __ldg(p.k_scales + tok);
          scV[n] = __ldg(p.v_scales + tok);
        }
      }
    }
  };
  auto store_tile = [&]() {
#pragma unroll
    for (int n = 0; n < C::NCH; ++n) {
      const int i = tid + n * C::NT;
      const int tk = i / C::CPR, c = i % C::CPR;
      store_chunk<KIND>(sK + tk * C::LDK + c * C::EPC, stK[n], scK[n]);
      store_chunk<KIND>(sV + tk * C::LDK + c * C::EPC, stV[n], scV[n]);
    }
  };

  const int ntiles = kend > kbeg ? (kend - kbeg + BN - 1) / BN : 0;
  if (ntiles > 0) {
    load_tile(kbeg);
    store_tile();
  }
  __syncthreads();
  for (int it = 0; it < ntiles; ++it) {
    const int k0 = kbeg + it * BN;
    if (it + 1 < ntiles) load_tile(k0 + BN);  // in flight while this tile is computed

    // S = Q K^T for this warp's 16 rows and BNW keys.
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> s[C::BNW / 16];
#pragma unroll
    for (int j = 0; j < C::BNW / 16; ++j) wmma::fill_fragment(s[j], 0.f);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
      wmma::load_matrix_sync(a, sQ + wm * 16 * C::LDQ + kk * 16, C::LDQ);
#pragma unroll
      for (int j = 0; j < C::BNW / 16; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
        wmma::load_matrix_sync(b, sK + (wn * C::BNW + j * 16) * C::LDK + kk * 16, C::LDK);
        wmma::mma_sync(s[j], a, b, s[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < C::BNW / 16; ++j)
      wmma::store_matrix_sync(sS + j * 16, s[j], C::LDS, wmma::mem_row_major);
    __syncwarp();

    // Online softmax in the log2 domain; two lanes per row.
    float* srow = sS + sr * C::LDS;
    const int kb = k0 + wn * C::BNW;
    float mx = -INFINITY;
#pragma unroll 4
    for (int c = sh; c < C::BNW; c += 2) {
      const int kp = kb + c;
      const float v = (kp <= mypos && kp < kend) ? srow[c] * qk_scale : -INFINITY;
      srow[c] = v;
      mx = fmaxf(mx, v);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m_run, mx);
    const float alpha = m_new == -INFINITY ? 1.f : exp2f(m_run - m_new);
    float sum = 0.f;
#pragma unroll 4
    for (int c = sh; c < C::BNW; c += 2) {
      const float v = srow[c];
      const float e = v == -INFINITY ? 0.f : exp2f(v - m_new);
      sP[sr * C::LDP + c] = __float2half_rn(e);
      sum += e;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l_run = l_run * alpha + sum;
    m_run = m_new;
    if (sh == 0) sAlpha[sr] = alpha;
    __syncwarp();

#pragma unroll
    for (int n = 0; n < D / 16; ++n)
#pragma unroll
      for (int i = 0; i < o[n].num_elements; ++i) o[n].x[i] *= sAlpha[rowOf[i]];

    // O += P V
#pragma unroll
    for (int kk = 0; kk < C::BNW / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
      wmma::load_matrix_sync(a, sP + kk * 16, C::LDP);
#pragma unroll
      for (int n = 0; n < D / 16; ++n) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
        wmma::load_matrix_sync(b, sV + (wn * C::BNW + kk * 16) * C::LDK + n * 16, C::LDK);
        wmma::mma_sync(o[n], a, b, o[n]);
      }
    }
    __syncthreads();
    if (it + 1 < ntiles) {
      store_tile();
      __syncthreads();
    }
  }

  // Merge the WN warps that share rows, normalise, write.
  if (sh == 0) {
    sM[warp * 16 + sr] = m_run;
    sL[warp * 16 + sr] = l_run;
  }
  __syncthreads();
  for (int r = tid; r < C::BM; r += C::NT) {
    const int rw = r / 16, rr = r % 16;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < WN; ++w) M = fmaxf(M, sM[(w * WM + rw) * 16 + rr]);
    float L = 0.f;
#pragma unroll
    for (int w = 0; w < WN; ++w) {
      const float mw = sM[(w * WM + rw) * 16 + rr];
      L += mw == -INFINITY ? 0.f : sL[(w * WM + rw) * 16 + rr] * exp2f(mw - M);
    }
    sRowM[r] = M;
    sRowL[r] = L;
  }
  __syncthreads();
  if (sh == 0) sAlpha[sr] = m_run == -INFINITY ? 0.f : exp2f(m_run - sRowM[wm * 16 + sr]);
  __syncwarp();
  float* sO = reinterpret_cast<float*>(smem) + warp * 16 * C::LDO;
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
#pragma unroll
    for (int i = 0; i < o[n].num_elements; ++i) o[n].x[i] *= sAlpha[rowOf[i]];
    wmma::store_matrix_sync(sO + n * 16, o[n], C::LDO, wmma::mem_row_major);
  }
  __syncthreads();
  const float* sOall = reinterpret_cast<const float*>(smem);
  for (int i = tid; i < C::BM * (D / 4); i += C::NT) {
    const int r = i / (D / 4), d = (i % (D / 4)) * 4;
    const int orow = sRowOut[r];
    if (orow < 0) continue;
    const int rw = r / 16, rr = r % 16;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < WN; ++w) {
      const float4 v = *reinterpret_cast<const float4*>(sOall + ((w * WM + rw) * 16 + rr) * C::LDO + d);
      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
    const float L = sRowL[r];
    const float inv = L > 0.f ? kv_unit<KIND>() / L : 0.f;
    acc.x *= inv; acc.y *= inv; acc.z *= inv; acc.w *= inv;
    if (p.num_splits == 1) {
      __half2* dst = reinterpret_cast<__half2*>(p.out + static_cast<size_t>(orow) * D + d);
      dst[0] = __floats2half2_rn(acc.x, acc.y);
      dst[1] = __floats2half2_rn(acc.z, acc.w);
    } else {
      const size_t prow = static_cast<size_t>(split) * p.num_tokens * p.num_heads + orow;
      *reinterpret_cast<float4*>(p.part_o + prow * D + d) = acc;
      if (d == 0) {
        p.part_ml[prow * 2] = sRowM[r];
        p.part_ml[prow * 2 + 1] = L;
      }
    }
  }
}

// Merge split partials: out = sum_s w_s o_s / sum_s w_s, w_s = l_s 2^(m_s - max m). One block per
// (token, head), one thread per channel.
template <int D>
__global__ void __launch_bounds__(D)
attn_reduce_kernel(__half* out, const float* part_o, const float* part_ml, int rows, int num_splits) {
  const int row = blockIdx.x, d = threadIdx.x;
  float M = -INFINITY;
  for (int s = 0; s < num_splits; ++s) M = fmaxf(M, part_ml[(static_cast<size_t>(s) * rows + row) * 2]);
  float acc = 0.f, wsum = 0.f;
  for (int s = 0; s < num_splits; ++s) {
    const size_t pr = static_cast<size_t>(s) * rows + row;
    const float m = part_ml[pr * 2], l = part_ml[pr * 2 + 1];
    if (m == -INFINITY || l <= 0.f) continue;
    const float w = l * exp2f(m - M);
    acc += w * part_o[pr * D + d];
    wsum += w;
  }
  out[static_cast<size_t>(row) * D + d] = __float2half_rn(wsum > 0.f ? acc / wsum : 0.f);
}

}  // namespace revolta
