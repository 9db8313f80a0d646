// Paged attention for prefill (chunks of new tokens over their cached prefix plus themselves).
//
// Compute-bound on the tensor cores, so the aim is few shared-memory bytes per MMA: each warp owns
// RF x 16 packed rows (query token x query head of the KV head's group), and every K/V fragment it loads
// from shared memory feeds RF MMAs. A block has WM warps (WM x RF x 16 rows) sharing each key tile of BN
// tokens, which all threads stage through registers (one tile ahead) and dequantise into fp16 shared
// memory. Online softmax in the log2 domain, fp32 accumulation, causal mask per row.
#pragma once

#include <mma.h>
#include "attention.cuh"
#include "pdl.cuh"

namespace revolta {

template <int D, int KIND, int WM, int RF, int BN>
struct PrefillCfg {
  static constexpr int NT = 32 * WM;
  static constexpr int RW = 16 * RF;  // rows per warp
  static constexpr int BM = RW * WM;  // rows per block
  static constexpr int LDQ = D + 8, LDK = D + 8, LDS = BN + 4, LDP = BN + 8, LDO = D + 4;
  static constexpr int ESZ = KIND == KV_F16 ? 2 : 1;
  static constexpr int EPC = 16 / ESZ;
  static constexpr int CPR = D / EPC;
  static constexpr int NCH = BN * CPR / NT;
  static constexpr int TSTEP = NT / CPR;
  static constexpr int Q_BYTES = BM * LDQ * 2;
  static constexpr int KV_BYTES = 2 * BN * LDK * 2;
  static constexpr int S_BYTES = BM * LDS * 4;
  static constexpr int P_BYTES = BM * LDP * 2;
  static constexpr int MAIN_BYTES = Q_BYTES + KV_BYTES + S_BYTES + P_BYTES;
  static constexpr int O_BYTES = BM * LDO * 4;  // output staging, reuses the area above
  static constexpr int BIG_BYTES = MAIN_BYTES > O_BYTES ? MAIN_BYTES : O_BYTES;
  static constexpr int SMEM_BYTES = BIG_BYTES + 3 * BM * 4;  // + alpha, row position, output row
  static_assert(BN % 16 == 0 && (BN * CPR) % NT == 0 && NT % CPR == 0, "tile must split evenly");
  static_assert(D % 16 == 0 && D <= 256, "head_dim must be a multiple of 16, at most 256");
};

// Exposed for tools/check_volta.py, which reads the dynamic shared memory of each instantiation.
template <int D, int KIND, int WM, int RF, int BN>
__device__ const int prefill_smem_bytes = PrefillCfg<D, KIND, WM, RF, BN>::SMEM_BYTES;

template <int D, int KIND, int WM, int RF, int BN, bool PREFETCH>
__global__ void __launch_bounds__(32 * WM)
paged_prefill_kernel(const AttnParams p) {
  // Programmatic dependent launch (pdl.cuh): everything this kernel reads (q, the caches, the block
  // tables and lengths) may come from the kernels before it, so it waits first, on every path.
  pdl_wait();
  pdl_trigger();
  using namespace nvcuda;
  using C = PrefillCfg<D, KIND, WM, RF, BN>;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* sQ = reinterpret_cast<__half*>(smem);
  __half* sK = reinterpret_cast<__half*>(smem + C::Q_BYTES);
  __half* sV = sK + BN * C::LDK;
  float* sAlpha = reinterpret_cast<float*>(smem + C::BIG_BYTES);
  int* sRowPos = reinterpret_cast<int*>(sAlpha + C::BM);
  int* sRowOut = sRowPos + C::BM;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seq = blockIdx.x / p.num_kv_heads, kvh = blockIdx.x % p.num_kv_heads;
  const int tile = gridDim.y - 1 - blockIdx.y;  // longest causal tiles first
  const int group = p.num_heads / p.num_kv_heads;
  const int q0 = p.query_start_loc[seq];
  const int qlen = p.query_start_loc[seq + 1] - q0;
  const int R = qlen * group;
  const int row0 = tile * C::BM;
  if (row0 >= R) return;
  const int ctx = p.context_lens[seq];
  const int kend = ctx - qlen + (min(R, row0 + C::BM) - 1) / group + 1;

  for (int r = tid; r < C::BM; r += C::NT) {
    const int gr = row0 + r;
    const bool ok = gr < R;
    sRowPos[r] = ok ? ctx - qlen + gr / group : -1;
    sRowOut[r] = ok ? (q0 + gr / group) * p.num_heads + kvh * group + gr % group : -1;
  }
  for (int i = tid; i < C::BM * (D / 8); i += C::NT) {
    const int r = i / (D / 8), c = i % (D / 8);
    const int gr = row0 + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (gr < R) {
      const size_t row = static_cast<size_t>(q0 + gr / group) * p.num_heads + kvh * group + gr % group;
      v = *reinterpret_cast<const uint4*>(p.q + row * D + c * 8);
    }
    *reinterpret_cast<uint4*>(sQ + r * C::LDQ + c * 8) = v;
  }

  const int wrow = warp * C::RW;  // this warp's first row in the block
  float* sS = reinterpret_cast<float*>(smem + C::Q_BYTES + C::KV_BYTES) + wrow * C::LDS;
  __half* sP = reinterpret_cast<__half*>(smem + C::Q_BYTES + C::KV_BYTES + C::S_BYTES) + wrow * C::LDP;
  float* sA = sAlpha + wrow;

  // WMMA leaves the row of each accumulator element unspecified; learn it from a matrix of row numbers.
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> rowmap;
  for (int i = lane; i < 256; i += 32) sS[(i / 16) * C::LDS + (i % 16)] = static_cast<float>(i / 16);
  __syncwarp();
  wmma::load_matrix_sync(rowmap, sS, C::LDS, wmma::mem_row_major);
  static_assert(decltype(rowmap)::num_elements <= 8, "row map packs 8 rows of 4 bits");
  uint32_t rowOf = 0;
#pragma unroll
  for (int i = 0; i < decltype(rowmap)::num_elements; ++i) rowOf |= static_cast<uint32_t>(rowmap.x[i]) << (4 * i);
  __syncwarp();

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> o[RF][D / 16];
#pragma unroll
  for (int f = 0; f < RF; ++f)
#pragma unroll
    for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(o[f][n], 0.f);

  const int sr = lane >> 1, sh = lane & 1;
  const float qk_scale = p.scale_log2 * kv_unit<KIND>();
  float m_run[RF], l_run[RF];
  int mypos[RF];
  __syncthreads();
#pragma unroll
  for (int f = 0; f < RF; ++f) {
    m_run[f] = -INFINITY;
    l_run[f] = 0.f;
    mypos[f] = sRowPos[wrow + f * 16 + sr];
  }

  const unsigned char* kc = static_cast<const unsigned char*>(p.k_cache);
  const unsigned char* vc = static_cast<const unsigned char*>(p.v_cache);
  const int* btab = p.block_tables + static_cast<size_t>(seq) * p.max_blocks;
  const int tk0 = tid / C::CPR, cbyte = (tid % C::CPR) * 16;
  const size_t blk_stride = static_cast<size_t>(p.num_kv_heads) * p.block_size;
  const int head_tok = kvh * p.block_size, bmask = p.block_size - 1;
  uint4 stK[C::NCH], stV[C::NCH];
  float scK[C::NCH], scV[C::NCH];
  auto load_tile = [&](int k0) {
    int bid[C::NCH];  // all block-table reads first, so their latencies overlap
#pragma unroll
    for (int n = 0; n < C::NCH; ++n) {
      const int kp = k0 + tk0 + n * C::TSTEP;
      bid[n] = kp < kend ? __ldg(btab + (kp >> p.block_shift)) : 0;
    }
#pragma unroll
    for (int n = 0; n < C::NCH; ++n) {
      const int kp = k0 + tk0 + n * C::TSTEP;
      stK[n] = make_uint4(0, 0, 0, 0);
      stV[n] = make_uint4(0, 0, 0, 0);
      scK[n] = 0.f;
      scV[n] = 0.f;
      if (kp < kend) {
        const size_t tok = static_cast<size_t>(bid[n]) * blk_stride + (head_tok + (kp & bmask));
        const size_t off = tok * (D * C::ESZ) + cbyte;
        stK[n] = __ldg(reinterpret_cast<const uint4*>(kc + off));
        stV[n] = __ldg(reinterpret_cast<const uint4*>(vc + off));
        if (KIND == KV_I8) {
          scK[n] = __ldg(p.k_scales + tok);
          scV[n] = __ldg(p.v_scales + tok);
        }
      }
    }
  };

  const int ntiles = (kend + BN - 1) / BN;
  if (PREFETCH) load_tile(0);
  for (int it = 0; it < ntiles; ++it) {
    const int k0 = it * BN;
    if (!PREFETCH) load_tile(k0);
#pragma unroll
    for (int n = 0; n < C::NCH; ++n) {
      const int soff = (tk0 + n * C::TSTEP) * C::LDK + cbyte / C::ESZ;
      store_chunk<KIND>(sK + soff, stK[n], scK[n]);
      store_chunk<KIND>(sV + soff, stV[n], scV[n]);
    }
    __syncthreads();
    if (PREFETCH && it + 1 < ntiles) load_tile(k0 + BN);  // in flight while this tile is computed

    // S = Q K^T: each K fragment feeds RF row fragments.
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[RF][BN / 16];
#pragma unroll
      for (int f = 0; f < RF; ++f)
#pragma unroll
        for (int j = 0; j < BN / 16; ++j) wmma::fill_fragment(acc[f][j], 0.f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[BN / 16];
#pragma unroll
        for (int j = 0; j < BN / 16; ++j) wmma::load_matrix_sync(b[j], sK + j * 16 * C::LDK + kk * 16, C::LDK);
#pragma unroll
        for (int f = 0; f < RF; ++f) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
          wmma::load_matrix_sync(a, sQ + (wrow + f * 16) * C::LDQ + kk * 16, C::LDQ);
#pragma unroll
          for (int j = 0; j < BN / 16; ++j) wmma::mma_sync(acc[f][j], a, b[j], acc[f][j]);
        }
      }
#pragma unroll
      for (int f = 0; f < RF; ++f)
#pragma unroll
        for (int j = 0; j < BN / 16; ++j)
          wmma::store_matrix_sync(sS + f * 16 * C::LDS + j * 16, acc[f][j], C::LDS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax; two lanes per row, RF rows per lane pair.
#pragma unroll
    for (int f = 0; f < RF; ++f) {
      float* srow = sS + (f * 16 + sr) * C::LDS;
      float mx = -INFINITY;
#pragma unroll
      for (int c = sh; c < BN; c += 2) {
        const int kp = k0 + c;
        const float v = kp <= mypos[f] ? srow[c] * qk_scale : -INFINITY;
        srow[c] = v;
        mx = fmaxf(mx, v);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_new = fmaxf(m_run[f], mx);
      const float alpha = m_new == -INFINITY ? 1.f : exp2f(m_run[f] - m_new);
      float sum = 0.f;
#pragma unroll
      for (int c = sh; c < BN; c += 2) {
        const float v = srow[c];
        const float e = v == -INFINITY ? 0.f : exp2f(v - m_new);
        sP[(f * 16 + sr) * C::LDP + c] = __float2half_rn(e);
        sum += e;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      l_run[f] = l_run[f] * alpha + sum;
      m_run[f] = m_new;
      if (sh == 0) sA[f * 16 + sr] = alpha;
    }
    __syncwarp();

    // O = alpha O + P V: each V fragment feeds RF row fragments.
#pragma unroll
    for (int f = 0; f < RF; ++f)
#pragma unroll
      for (int n = 0; n < D / 16; ++n)
#pragma unroll
        for (int i = 0; i < decltype(rowmap)::num_elements; ++i)
          o[f][n].x[i] *= sA[f * 16 + ((rowOf >> (4 * i)) & 15u)];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[RF];
#pragma unroll
      for (int f = 0; f < RF; ++f) wmma::load_matrix_sync(a[f], sP + f * 16 * C::LDP + kk * 16, C::LDP);
#pragma unroll
      for (int n = 0; n < D / 16; ++n) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
        wmma::load_matrix_sync(b, sV + kk * 16 * C::LDK + n * 16, C::LDK);
#pragma unroll
        for (int f = 0; f < RF; ++f) wmma::mma_sync(o[f][n], a[f], b, o[f][n]);
      }
    }
    __syncthreads();
  }

  // Normalise (1 / l, times the fp8 unit) and write this warp's rows.
#pragma unroll
  for (int f = 0; f < RF; ++f)
    if (sh == 0) sA[f * 16 + sr] = l_run[f] > 0.f ? kv_unit<KIND>() / l_run[f] : 0.f;
  __syncwarp();
  float* sO = reinterpret_cast<float*>(smem) + wrow * C::LDO;  // whole-block area is free after the loop
#pragma unroll
  for (int f = 0; f < RF; ++f)
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
#pragma unroll
      for (int i = 0; i < decltype(rowmap)::num_elements; ++i)
        o[f][n].x[i] *= sA[f * 16 + ((rowOf >> (4 * i)) & 15u)];
      wmma::store_matrix_sync(sO + f * 16 * C::LDO + n * 16, o[f][n], C::LDO, wmma::mem_row_major);
    }
  __syncwarp();
  for (int i = lane; i < C::RW * (D / 4); i += 32) {
    const int r = i / (D / 4), d = (i % (D / 4)) * 4;
    const int orow = sRowOut[wrow + r];
    if (orow < 0) continue;
    const float4 v = *reinterpret_cast<const float4*>(sO + r * C::LDO + d);
    __half2* dst = reinterpret_cast<__half2*>(p.out + static_cast<size_t>(orow) * D + d);
    dst[0] = __floats2half2_rn(v.x, v.y);
    dst[1] = __floats2half2_rn(v.z, v.w);
  }
}

}  // namespace revolta
