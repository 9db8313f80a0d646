// Paged attention for decode and speculative verification (a few query tokens per sequence).
//
// Memory-bound: the goal is many KV bytes in flight with few registers per thread. A block owns one
// (sequence, KV head, 16-row tile, context split); rows pack (query token, query head of the group), so
// the KV tile is read once for the whole GQA group. Per key tile of BN tokens:
//   - every thread loads its share of K and V (16-byte chunks) into registers, STAGES tiles ahead,
//     then dequantises them into fp16 shared memory;
//   - warp w computes S = Q K^T for keys [w*BN/NW, (w+1)*BN/NW) with WMMA (fp32 accumulate);
//   - the block runs the online softmax over the tile (8 threads per row);
//   - warp w accumulates O[:, w*D/NW ...] += P V over all BN keys, so each thread holds only D/NW
//     output columns (the register budget goes to staging loads instead).
#pragma once

#include <mma.h>
#include "attention.cuh"
#include "decode_merge.cuh"

namespace revolta {

template <int D, int KIND, int NW, int BN, int STAGES, int ROWS>
struct DecodeCfg {
  static constexpr int FN = 256 / ROWS;  // WMMA shape ROWS x FN x 16: 16x16x16, or 8x32x16 for <= 8 rows
  static_assert(NW * FN <= BN, "the row-map scratch needs an FN-column band per warp");
  static constexpr int NT = 32 * NW;
  static constexpr int LDQ = D + 8, LDK = D + 8, LDS = BN + 4, LDP = BN + 8, LDO = D + 4;
  static constexpr int ESZ = KIND == KV_F16 ? 2 : 1;
  static constexpr int EPC = 16 / ESZ;
  static constexpr int CPR = D / EPC;
  static constexpr int NCH = BN * CPR / NT;
  static constexpr int SW = BN / NW;       // keys per warp for S
  static constexpr int OW = D / NW;        // output columns per warp
  static constexpr int Q_BYTES = ROWS * LDQ * 2;
  static constexpr int KV_BYTES = 2 * BN * LDK * 2;
  static constexpr int S_BYTES = ROWS * LDS * 4;
  static constexpr int P_BYTES = ROWS * LDP * 2;
  static constexpr int O_BYTES = ROWS * LDO * 4;  // reuses the K/V area at the end
  static constexpr int SMEM_BYTES = Q_BYTES + KV_BYTES + S_BYTES + P_BYTES + 5 * ROWS * 4;
  static_assert(SW % FN == 0 && OW % FN == 0, "warp slices must be whole fragments");
  static_assert((BN * CPR) % NT == 0 && NT % CPR == 0, "tile chunks must divide among threads");
  static_assert(O_BYTES <= KV_BYTES, "output staging must fit in the K/V area");
  static_assert(NT / ROWS <= 32 && (NT / ROWS & (NT / ROWS - 1)) == 0, "threads per row: power of two <= 32");
};

// Exposed for tools/check_volta.py, which reads the dynamic shared memory of each instantiation.
template <int D, int KIND, int NW, int BN, int STAGES, int ROWS>
__device__ const int decode_smem_bytes = DecodeCfg<D, KIND, NW, BN, STAGES, ROWS>::SMEM_BYTES;

template <int D, int KIND, int NW, int BN, int STAGES, int MINB, int ROWS>
__global__ void __launch_bounds__(32 * NW, MINB)
paged_decode_kernel(const AttnParams p) {
  using namespace nvcuda;
  using C = DecodeCfg<D, KIND, NW, BN, STAGES, ROWS>;
  constexpr int FN = C::FN;
  constexpr int TPR = C::NT / ROWS;  // softmax threads per row
  extern __shared__ __align__(128) unsigned char smem[];
  __half* sQ = reinterpret_cast<__half*>(smem);
  __half* sK = reinterpret_cast<__half*>(smem + C::Q_BYTES);
  __half* sV = sK + BN * C::LDK;
  float* sS = reinterpret_cast<float*>(smem + C::Q_BYTES + C::KV_BYTES);
  __half* sP = reinterpret_cast<__half*>(smem + C::Q_BYTES + C::KV_BYTES + C::S_BYTES);
  float* sAlpha = reinterpret_cast<float*>(smem + C::Q_BYTES + C::KV_BYTES + C::S_BYTES + C::P_BYTES);
  float* sRowM = sAlpha + ROWS;
  float* sRowL = sRowM + ROWS;
  int* sRowPos = reinterpret_cast<int*>(sRowL + ROWS);
  int* sRowOut = sRowPos + ROWS;

  // Launched with PDL (pdl.cuh): q, the cache and the metadata come from earlier kernels / copies.
  pdl_wait();
  pdl_trigger();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seq = blockIdx.x / p.num_kv_heads, kvh = blockIdx.x % p.num_kv_heads;
  const int split = blockIdx.z;
  const int group = p.num_heads / p.num_kv_heads;
  const int q0 = p.query_start_loc[seq];
  const int qlen = p.query_start_loc[seq + 1] - q0;
  const int R = qlen * group;
  const int ctx = p.context_lens[seq];  // before the exit: loaded together with query_start_loc
  const int row0 = blockIdx.y * ROWS;
  if (row0 >= R) return;
  const int last_row = min(R, row0 + ROWS) - 1;
  const int kend_all = ctx - qlen + last_row / group + 1;
  const int slen = p.split_tokens > 0 ? p.split_tokens : split_len<BN>(kend_all, p.num_splits);
  const int n_active = max(1, (kend_all + slen - 1) / slen);  // 1: a row tile with no keys writes zeros
  if (split >= n_active) return;
  const int kbeg = split * slen;
  const int kend = min(kend_all, kbeg + slen);

  // The query rows go into registers first, then the first tiles' block ids and K/V loads go out, then
  // the query is staged in shared memory: the three global round trips overlap.
  constexpr int QN = ROWS * (D / 8) / C::NT;
  static_assert(ROWS * (D / 8) % C::NT == 0, "query chunks must divide among threads");
  uint4 qv[QN];
#pragma unroll
  for (int j = 0; j < QN; ++j) {
    const int i = tid + j * C::NT;
    const int gr = row0 + i / (D / 8);
    qv[j] = make_uint4(0, 0, 0, 0);
    if (gr < R) {
      const size_t row = static_cast<size_t>(q0 + gr / group) * p.num_heads + kvh * group + gr % group;
      qv[j] = *reinterpret_cast<const uint4*>(p.q + row * D + (i % (D / 8)) * 8);
    }
  }
  const unsigned char* kc = static_cast<const unsigned char*>(p.k_cache);
  const unsigned char* vc = static_cast<const unsigned char*>(p.v_cache);
  const int* btab = p.block_tables + static_cast<size_t>(seq) * p.max_blocks;
  uint4 stK[STAGES][C::NCH], stV[STAGES][C::NCH];
  float scK[STAGES][C::NCH], scV[STAGES][C::NCH];

  const int ntiles = kend > kbeg ? (kend - kbeg + BN - 1) / BN : 0;
  // Thread tid always loads chunk c of tokens tk0, tk0 + TSTEP, ...; block_size is a power of two.
  constexpr int TSTEP = C::NT / C::CPR;
  const int tk0 = tid / C::CPR, cbyte = (tid % C::CPR) * 16;
  const size_t blk_stride = static_cast<size_t>(p.num_kv_heads) * p.block_size;
  const int head_tok = kvh * p.block_size, bmask = p.block_size - 1;
  // Block ids of the next tile to load are fetched one tile earlier still, so the block-table read
  // and the K/V read it addresses are never back to back on the critical path.
  int bidn[C::NCH];
#define DECODE_LOAD_BLOCK_IDS(K0)                                                                     \
  _Pragma("unroll") for (int n = 0; n < C::NCH; ++n) {                                      \
    const int kp = (K0) + tk0 + n * TSTEP;                                                  \
    bidn[n] = kp < kend ? __ldg(btab + (kp >> p.block_shift)) : 0;                          \
  }
#define DECODE_LOAD_TILE(S, K0)                                                                  \
  _Pragma("unroll") for (int n = 0; n < C::NCH; ++n) {                                      \
    const int kp = (K0) + tk0 + n * TSTEP;                                                  \
    stK[S][n] = make_uint4(0, 0, 0, 0);                                                     \
    stV[S][n] = make_uint4(0, 0, 0, 0);                                                     \
    scK[S][n] = 0.f;                                                                        \
    scV[S][n] = 0.f;                                                                        \
    if (kp < kend) {                                                                        \
      const size_t tok = static_cast<size_t>(bidn[n]) * blk_stride + (head_tok + (kp & bmask)); \
      const size_t off = tok * (D * C::ESZ) + cbyte;                                        \
      stK[S][n] = __ldg(reinterpret_cast<const uint4*>(kc + off));                          \
      stV[S][n] = __ldg(reinterpret_cast<const uint4*>(vc + off));                          \
      if (KIND == KV_I8) {                                                                  \
        scK[S][n] = __ldg(p.k_scales + tok);                                                \
        scV[S][n] = __ldg(p.v_scales + tok);                                                \
      }                                                                                     \
    }                                                                                       \
  }
#pragma unroll
  for (int s = 0; s < STAGES; ++s)
    if (s < ntiles) {
      DECODE_LOAD_BLOCK_IDS(kbeg + s * BN)
      DECODE_LOAD_TILE(s, kbeg + s * BN)
    }
  if (STAGES < ntiles) { DECODE_LOAD_BLOCK_IDS(kbeg + STAGES * BN) }

  if (tid < ROWS) {
    const int gr = row0 + tid;
    const bool ok = gr < R;
    const int t = gr / group, j = gr % group;
    sRowPos[tid] = ok ? ctx - qlen + t : -1;
    sRowOut[tid] = ok ? (q0 + t) * p.num_heads + kvh * group + j : -1;
  }
#pragma unroll
  for (int j = 0; j < QN; ++j) {
    const int i = tid + j * C::NT;
    *reinterpret_cast<uint4*>(sQ + (i / (D / 8)) * C::LDQ + (i % (D / 8)) * 8) = qv[j];
  }
  // Learn which row each accumulator element holds (WMMA leaves the mapping unspecified).
  wmma::fragment<wmma::accumulator, ROWS, FN, 16, float> rowmap;
  float* scratch = sS + warp * FN;  // each warp a disjoint FN-column band of sS
  for (int i = lane; i < 256; i += 32) scratch[(i / FN) * C::LDS + (i % FN)] = static_cast<float>(i / FN);
  __syncwarp();
  wmma::load_matrix_sync(rowmap, scratch, C::LDS, wmma::mem_row_major);
  static_assert(decltype(rowmap)::num_elements <= 8, "row map packs 8 rows of 4 bits");
  uint32_t rowOf = 0;  // 4 bits per accumulator element: one register instead of eight
#pragma unroll
  for (int i = 0; i < decltype(rowmap)::num_elements; ++i) rowOf |= static_cast<uint32_t>(rowmap.x[i]) << (4 * i);

  wmma::fragment<wmma::accumulator, ROWS, FN, 16, float> o[C::OW / FN];
#pragma unroll
  for (int n = 0; n < C::OW / FN; ++n) wmma::fill_fragment(o[n], 0.f);

  const int srow = tid / TPR, spart = tid % TPR;  // softmax: TPR threads per row
  const float qk_scale = p.scale_log2 * kv_unit<KIND>();
  float m_run = -INFINITY, l_run = 0.f;
  __syncthreads();
  const int mypos = sRowPos[srow];

  for (int base = 0; base < ntiles; base += STAGES) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      const int it = base + s;
      if (it < ntiles) {
        const int k0 = kbeg + it * BN;
#pragma unroll
        for (int n = 0; n < C::NCH; ++n) {
          const int soff = (tk0 + n * TSTEP) * C::LDK + (cbyte / C::ESZ);
          store_chunk<KIND>(sK + soff, stK[s][n], scK[s][n]);
          store_chunk<KIND>(sV + soff, stV[s][n], scV[s][n]);
        }
        __syncthreads();
        if (it + STAGES < ntiles) {
          DECODE_LOAD_TILE(s, k0 + STAGES * BN)
          if (it + STAGES + 1 < ntiles) { DECODE_LOAD_BLOCK_IDS(k0 + (STAGES + 1) * BN) }
        }

        // S slice of this warp
        {
          wmma::fragment<wmma::accumulator, ROWS, FN, 16, float> acc[C::SW / FN];
#pragma unroll
          for (int j = 0; j < C::SW / FN; ++j) wmma::fill_fragment(acc[j], 0.f);
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) {
            wmma::fragment<wmma::matrix_a, ROWS, FN, 16, __half, wmma::row_major> a;
            wmma::load_matrix_sync(a, sQ + kk * 16, C::LDQ);
#pragma unroll
            for (int j = 0; j < C::SW / FN; ++j) {
              wmma::fragment<wmma::matrix_b, ROWS, FN, 16, __half, wmma::col_major> b;
              wmma::load_matrix_sync(b, sK + (warp * C::SW + j * FN) * C::LDK + kk * 16, C::LDK);
              wmma::mma_sync(acc[j], a, b, acc[j]);
            }
          }
#pragma unroll
          for (int j = 0; j < C::SW / FN; ++j)
            wmma::store_matrix_sync(sS + warp * C::SW + j * FN, acc[j], C::LDS, wmma::mem_row_major);
        }
        __syncthreads();

        // Online softmax over the tile, TPR threads per row (consecutive lanes).
        {
          float* rowp = sS + srow * C::LDS;
          float v[BN / TPR];
          float mx = -INFINITY;
#pragma unroll
          for (int e = 0; e < BN / TPR; ++e) {
            const int c = spart + e * TPR;
            const int kp = k0 + c;
            v[e] = (kp <= mypos && kp < kend) ? rowp[c] * qk_scale : -INFINITY;
            mx = fmaxf(mx, v[e]);
          }
#pragma unroll
          for (int o_ = TPR / 2; o_ > 0; o_ >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o_));
          const float m_new = fmaxf(m_run, mx);
          const float alpha = m_new == -INFINITY ? 1.f : exp2f(m_run - m_new);
          float sum = 0.f;
#pragma unroll
          for (int e = 0; e < BN / TPR; ++e) {
            const float x = v[e] == -INFINITY ? 0.f : exp2f(v[e] - m_new);
            sP[srow * C::LDP + spart + e * TPR] = __float2half_rn(x);
            sum += x;
          }
#pragma unroll
          for (int o_ = TPR / 2; o_ > 0; o_ >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o_);
          l_run = l_run * alpha + sum;
          m_run = m_new;
          if (spart == 0) sAlpha[srow] = alpha;
        }
        __syncthreads();

        // O[:, warp slice] = alpha * O + P V
#pragma unroll
        for (int n = 0; n < C::OW / FN; ++n)
#pragma unroll
          for (int i = 0; i < decltype(rowmap)::num_elements; ++i) o[n].x[i] *= sAlpha[(rowOf >> (4 * i)) & 15u];
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, ROWS, FN, 16, __half, wmma::row_major> a;
          wmma::load_matrix_sync(a, sP + kk * 16, C::LDP);
#pragma unroll
          for (int n = 0; n < C::OW / FN; ++n) {
            wmma::fragment<wmma::matrix_b, ROWS, FN, 16, __half, wmma::row_major> b;
            wmma::load_matrix_sync(b, sV + kk * 16 * C::LDK + warp * C::OW + n * FN, C::LDK);
            wmma::mma_sync(o[n], a, b, o[n]);
          }
        }
        __syncthreads();
      }
    }
  }
#undef DECODE_LOAD_TILE
#undef DECODE_LOAD_BLOCK_IDS

  if (spart == 0) {
    sRowM[srow] = m_run;
    sRowL[srow] = l_run;
  }
  float* sO = reinterpret_cast<float*>(sK);  // K/V area is free now
#pragma unroll
  for (int n = 0; n < C::OW / FN; ++n)
    wmma::store_matrix_sync(sO + warp * C::OW + n * FN, o[n], C::LDO, wmma::mem_row_major);
  __syncthreads();
  for (int i = tid; i < ROWS * (D / 4); i += C::NT) {
    const int r = i / (D / 4), d = (i % (D / 4)) * 4;
    const int orow = sRowOut[r];
    if (orow < 0) continue;
    float4 acc = *reinterpret_cast<const float4*>(sO + r * C::LDO + d);
    const float L = sRowL[r];
    const float inv = L > 0.f ? kv_unit<KIND>() / L : 0.f;
    acc.x *= inv; acc.y *= inv; acc.z *= inv; acc.w *= inv;
    if (n_active == 1) {
      __half2* dst = reinterpret_cast<__half2*>(p.out + static_cast<size_t>(orow) * D + d);
      dst[0] = __floats2half2_rn(acc.x, acc.y);
      dst[1] = __floats2half2_rn(acc.z, acc.w);
    } else {
      const size_t prow = static_cast<size_t>(split) * p.num_tokens * p.num_heads + orow;
      *reinterpret_cast<float4*>(p.part_o + prow * D + d) = acc;
      if (d == 0) reinterpret_cast<float2*>(p.part_ml)[prow] = make_float2(sRowM[r], L);
    }
  }
  if (n_active > 1)
    merge_splits<D, C::NT>(p, blockIdx.x * gridDim.y + blockIdx.y, n_active, row0, last_row - row0 + 1, q0, kvh,
                           group, reinterpret_cast<float*>(smem), C::SMEM_BYTES / 4);
}

}  // namespace revolta
