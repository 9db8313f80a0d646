// Paged prefill with S and P kept in registers (FlashAttention-2 style), for GPUs whose WMMA fragments
// follow the layout of mma_layout.cuh (the host checks it; elsewhere prefill.cuh runs).
//
// A block has WM warps of RF x 16 packed rows (query token x query head of the KV head's group) and walks
// the keys in tiles of BN tokens that all threads stage through registers (one tile ahead) into fp16
// shared memory (DBUF: two buffers, one barrier per tile). Per tile each warp computes S = Q K^T into
// accumulators, runs the online softmax on them in place (rows reduced with two quad shuffles), turns
// them into the matrix_a fragments of P and accumulates O += P V, each V fragment feeding RF rows. Only
// tiles that cross the causal diagonal are masked; a warp skips tiles entirely after its last row, and
// the O rescale is skipped when no row maximum moved. Output goes through the warp's own Q rows in
// shared memory so the global stores are 16 bytes wide. QREG keeps the warp's Q fragments in registers
// instead of reloading them from shared memory for every key tile. SPLIT stages K and V separately (V_i
// while S = Q K_i^T runs, K_{i+1} while the softmax and P V_i run), so only half a tile's staging
// registers are live at a time.
#pragma once

#include <mma.h>
#include "attention.cuh"
#include "pdl.cuh"
#include "mma_layout.cuh"

namespace revolta {

template <int D, int KIND, int WM, int RF, int BN, bool DBUF>
struct PrefillMmaCfg {
  static constexpr int NT = 32 * WM;
  static constexpr int RW = 16 * RF;  // rows per warp
  static constexpr int BM = RW * WM;  // rows per block
  static constexpr int LDQ = D + 8, LDK = D + 8;
  static constexpr int ESZ = KIND == KV_F16 ? 2 : 1;
  static constexpr int EPC = 16 / ESZ;
  static constexpr int CPR = D / EPC;
  static constexpr int NCH = BN * CPR / NT;
  static constexpr int TSTEP = NT / CPR;
  static constexpr int Q_BYTES = BM * LDQ * 2;
  static constexpr int KV_BYTES = 2 * BN * LDK * 2;
  static constexpr int NBUF = DBUF ? 2 : 1;
  static constexpr int SMEM_BYTES = Q_BYTES + NBUF * KV_BYTES + 2 * BM * 4;
  static_assert(BN % 16 == 0 && NCH >= 1 && (BN * CPR) % NT == 0 && NT % CPR == 0, "tile must split evenly");
};

template <int D, int KIND, int WM, int RF, int BN, bool DBUF>
__device__ const int prefill_mma_smem_bytes = PrefillMmaCfg<D, KIND, WM, RF, BN, DBUF>::SMEM_BYTES;

template <bool B>
struct PrefillBool {
  static constexpr bool value = B;
};

template <int D, int KIND, int WM, int RF, int BN, bool DBUF, int MINB, bool QREG, int SPLIT = 0>
__global__ void __launch_bounds__(32 * WM, MINB)
paged_prefill_mma_kernel(const AttnParams p) {
  // Programmatic dependent launch (pdl.cuh): everything this kernel reads (q, the caches, the block
  // tables and lengths) may come from the kernels before it, so it waits first, on every path.
  pdl_wait();
  pdl_trigger();
  using namespace nvcuda;
  using C = PrefillMmaCfg<D, KIND, WM, RF, BN, DBUF>;
  constexpr int NJ = BN / 16, ND = D / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* sQ = reinterpret_cast<__half*>(smem);
  __half* sKV = reinterpret_cast<__half*>(smem + C::Q_BYTES);
  int* sRowPos = reinterpret_cast<int*>(smem + C::Q_BYTES + C::NBUF * C::KV_BYTES);
  int* sRowOut = sRowPos + C::BM;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
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
  __syncthreads();

  const int wrow = warp * C::RW;
  const int nreal = min(C::RW, R - row0 - wrow);  // real rows of this warp (rows only grow in position)
  const int wlo = nreal > 0 ? sRowPos[wrow] : 0;
  const int whi = nreal > 0 ? sRowPos[wrow + nreal - 1] : -1;
  int pos[RF][2];
#pragma unroll
  for (int f = 0; f < RF; ++f)
#pragma unroll
    for (int h = 0; h < 2; ++h) pos[f][h] = sRowPos[wrow + f * 16 + g + 8 * h];

  FragA qf[QREG ? RF : 1][QREG ? ND : 1];
  if constexpr (QREG) {
#pragma unroll
    for (int f = 0; f < RF; ++f)
#pragma unroll
      for (int kk = 0; kk < ND; ++kk) wmma::load_matrix_sync(qf[f][kk], sQ + (wrow + f * 16) * C::LDQ + kk * 16, C::LDQ);
  }

  FragAcc o[RF][ND];
#pragma unroll
  for (int f = 0; f < RF; ++f)
#pragma unroll
    for (int n = 0; n < ND; ++n) wmma::fill_fragment(o[f][n], 0.f);
  float m_run[RF][2], l_run[RF][2];
#pragma unroll
  for (int f = 0; f < RF; ++f)
#pragma unroll
    for (int h = 0; h < 2; ++h) m_run[f][h] = -INFINITY, l_run[f][h] = 0.f;
  const float qk_scale = p.scale_log2 * kv_unit<KIND>();

  const unsigned char* kc = static_cast<const unsigned char*>(p.k_cache);
  const unsigned char* vc = static_cast<const unsigned char*>(p.v_cache);
  const int* btab = p.block_tables + static_cast<size_t>(seq) * p.max_blocks;
  const int tk0 = tid / C::CPR, cbyte = (tid % C::CPR) * 16;
  const size_t blk_stride = static_cast<size_t>(p.num_kv_heads) * p.block_size;
  const int head_tok = kvh * p.block_size, bmask = p.block_size - 1;
  uint4 stK[C::NCH], stV[C::NCH];
  float scK[C::NCH], scV[C::NCH];
  // Keys past kend (the last tile's tail) are read as key kend - 1: a valid cache entry, so its finite
  // scores are masked like any key past the diagonal and P = 0 multiplies a finite V (no zero fill, no
  // branches around the loads).
  // Chunks [lo, hi) of this thread (chunk n holds key row tk0 + n * TSTEP).
  auto load_part = [&](int k0, auto with_k, auto with_v, int lo, int hi) {
    constexpr bool LK = decltype(with_k)::value, LV = decltype(with_v)::value;
    int bid[C::NCH], kp[C::NCH];  // all block-table reads first, so their latencies overlap
#pragma unroll
    for (int n = 0; n < C::NCH; ++n) {
      if (n < lo || n >= hi) continue;
      kp[n] = min(k0 + tk0 + n * C::TSTEP, kend - 1);
      bid[n] = __ldg(btab + (kp[n] >> p.block_shift));
    }
#pragma unroll
    for (int n = 0; n < C::NCH; ++n) {
      if (n < lo || n >= hi) continue;
      const size_t tok = static_cast<size_t>(bid[n]) * blk_stride + (head_tok + (kp[n] & bmask));
      const size_t off = tok * (D * C::ESZ) + cbyte;
      if constexpr (LK) {
        stK[n] = __ldg(reinterpret_cast<const uint4*>(kc + off));
        scK[n] = KIND == KV_I8 ? __ldg(p.k_scales + tok) : 0.f;
      }
      if constexpr (LV) {
        stV[n] = __ldg(reinterpret_cast<const uint4*>(vc + off));
        scV[n] = KIND == KV_I8 ? __ldg(p.v_scales + tok) : 0.f;
      }
    }
  };
  auto load_tile = [&](int k0) { load_part(k0, PrefillBool<true>(), PrefillBool<true>(), 0, C::NCH); };
  auto store_part = [&](int buf, auto with_k, auto with_v, int lo, int hi) {
    __half* sK = sKV + buf * 2 * BN * C::LDK;
    __half* sV = sK + BN * C::LDK;
#pragma unroll
    for (int n = 0; n < C::NCH; ++n) {
      if (n < lo || n >= hi) continue;
      const int soff = (tk0 + n * C::TSTEP) * C::LDK + cbyte / C::ESZ;
      if constexpr (decltype(with_k)::value) store_chunk<KIND>(sK + soff, stK[n], scK[n]);
      if constexpr (decltype(with_v)::value) store_chunk<KIND>(sV + soff, stV[n], scV[n]);
    }
  };
  auto store_tile = [&](int buf) { store_part(buf, PrefillBool<true>(), PrefillBool<true>(), 0, C::NCH); };

  // S = Q K^T of one key tile into acc; mid() runs halfway through the head dimension.
  auto compute_s = [&](int buf, FragAcc (&acc)[RF][NJ], auto mid) {
    const __half* sK = sKV + buf * 2 * BN * C::LDK;
#pragma unroll
    for (int f = 0; f < RF; ++f)
#pragma unroll
      for (int j = 0; j < NJ; ++j) wmma::fill_fragment(acc[f][j], 0.f);
#pragma unroll
    for (int kk = 0; kk < ND; ++kk) {
      if (kk == ND / 2) mid();
      FragA a[QREG ? 1 : RF];
      if constexpr (!QREG) {
#pragma unroll
        for (int f = 0; f < RF; ++f) wmma::load_matrix_sync(a[f], sQ + (wrow + f * 16) * C::LDQ + kk * 16, C::LDQ);
      }
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        FragBCol b;
        wmma::load_matrix_sync(b, sK + j * 16 * C::LDK + kk * 16, C::LDK);
#pragma unroll
        for (int f = 0; f < RF; ++f) wmma::mma_sync(acc[f][j], QREG ? qf[QREG ? f : 0][QREG ? kk : 0] : a[QREG ? 0 : f], b, acc[f][j]);
      }
    }
  };

  // Online softmax on acc, then O += P V of the same tile; mid() runs halfway through the keys.
  auto softmax_pv = [&](int buf, int k0, FragAcc (&acc)[RF][NJ], auto mid) {
    const __half* sV = sKV + buf * 2 * BN * C::LDK + BN * C::LDK;

    // Online softmax on the accumulators: element e is row g + 8 ((e >> 1) & 1), key 16 j + 2t + (e & 1)
    // + 8 (e >> 2). Scores stay unscaled until the exponent (max commutes with the positive scale).
    // Only tiles that cross the diagonal are masked (a warp-uniform branch).
    if (k0 + BN - 1 > wlo) {
#pragma unroll
      for (int f = 0; f < RF; ++f)
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
          for (int e = 0; e < 8; ++e)
            if (k0 + 16 * j + 2 * t + (e & 1) + 8 * (e >> 2) > pos[f][(e >> 1) & 1]) acc[f][j].x[e] = -INFINITY;
    }
    // Row maxima as pairwise trees (short dependency chains; fmax is exact in any order). The running
    // maximum m_run is only moved (and O rescaled) when some row of the warp exceeds it by more than
    // 2^8: with a stale maximum every P = 2^(s - m_run) <= 256, far inside fp16, and O, l stay exact in
    // fp32, so most tiles skip the rescale of O entirely.
    float mcand[RF][2];
    bool need = false;
#pragma unroll
    for (int f = 0; f < RF; ++f)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v[4 * NJ];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) v[4 * j + q] = acc[f][j].x[(q & 1) + 2 * h + 4 * (q >> 1)];
#pragma unroll
        for (int w = 1; w < 4 * NJ; w *= 2)
#pragma unroll
          for (int i = 0; i + w < 4 * NJ; i += 2 * w) v[i] = fmaxf(v[i], v[i + w]);
        float mx = v[0];
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mcand[f][h] = fmaxf(m_run[f][h], mx * qk_scale);
        need |= mcand[f][h] > m_run[f][h] + 8.f;  // true on a row's first unmasked tile (m_run = -inf)
      }
    const bool rescale = __any_sync(0xffffffffu, need);
    float alpha[RF][2];
#pragma unroll
    for (int f = 0; f < RF; ++f)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float m_new = rescale ? mcand[f][h] : m_run[f][h];
        const float msub = m_new == -INFINITY ? 0.f : m_new;  // keeps -inf - -inf out of exp2
        alpha[f][h] = fast_exp2(m_run[f][h] - msub);
        float v[4 * NJ];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int e = (q & 1) + 2 * h + 4 * (q >> 1);
            const float pr = fast_exp2(fmaf(acc[f][j].x[e], qk_scale, -msub));
            acc[f][j].x[e] = pr;
            v[4 * j + q] = pr;
          }
#pragma unroll
        for (int w = 1; w < 4 * NJ; w *= 2)
#pragma unroll
          for (int i = 0; i + w < 4 * NJ; i += 2 * w) v[i] += v[i + w];
        l_run[f][h] = rescale ? l_run[f][h] * alpha[f][h] + v[0] : l_run[f][h] + v[0];
        m_run[f][h] = m_new;
      }
    if (rescale) {
#pragma unroll
      for (int f = 0; f < RF; ++f)
#pragma unroll
        for (int n = 0; n < ND; ++n)
#pragma unroll
          for (int e = 0; e < 8; ++e) o[f][n].x[e] *= alpha[f][(e >> 1) & 1];
    }

    // O += P V with P's matrix_a fragments made from the accumulators in place.
#pragma unroll
    for (int kk = 0; kk < NJ; ++kk) {
      if (kk == NJ / 2) mid();
      FragA pa[RF];
#pragma unroll
      for (int f = 0; f < RF; ++f) {
        const FragAcc& s = acc[f][kk];
        frag_set_words(pa[f], pack_half2(s.x[0], s.x[1]), pack_half2(s.x[2], s.x[3]), pack_half2(s.x[4], s.x[5]),
                       pack_half2(s.x[6], s.x[7]));
      }
#pragma unroll
      for (int n = 0; n < ND; ++n) {
        FragBRow b;
        wmma::load_matrix_sync(b, sV + kk * 16 * C::LDK + n * 16, C::LDK);
#pragma unroll
        for (int f = 0; f < RF; ++f) wmma::mma_sync(o[f][n], pa[f], b, o[f][n]);
      }
    }
  };
  auto compute = [&](int buf, int k0) {
    FragAcc acc[RF][NJ];
    auto none = [] {};
    compute_s(buf, acc, none);
    softmax_pv(buf, k0, acc, none);
  };

  const int ntiles = (kend + BN - 1) / BN;
  if constexpr (SPLIT > 0) {
    // K and V staged separately, so only one of them is in registers at a time: V of tile i is loaded
    // while S = Q K_i^T is computed, K of tile i + 1 while the softmax and P V_i run. One K and one V
    // buffer; barrier 1 publishes V_i and retires K_i, barrier 2 publishes K_{i+1} and retires V_i.
    // SPLIT 2 stages each in two halves (the second half loaded once the first is stored, midway
    // through the MMAs), halving the staging registers again.
    const PrefillBool<true> yes;
    const PrefillBool<false> no;
    constexpr int H = SPLIT > 1 ? C::NCH / 2 : C::NCH;
    static_assert(SPLIT == 1 || C::NCH % 2 == 0, "halves need an even chunk count");
    load_part(0, yes, no, 0, C::NCH);
    store_part(0, yes, no, 0, C::NCH);
    __syncthreads();
    for (int it = 0; it < ntiles; ++it) {
      const int k0 = it * BN;
      const bool active = k0 <= whi, more = it + 1 < ntiles;
      load_part(k0, no, yes, 0, H);
      auto vmid = [&] {
        if constexpr (SPLIT > 1) {
          store_part(0, no, yes, 0, H);  // V_{i-1}'s readers all passed the previous barrier 2
          load_part(k0, no, yes, H, C::NCH);
        }
      };
      FragAcc acc[RF][NJ];
      if (active) compute_s(0, acc, vmid);
      else vmid();
      store_part(0, no, yes, SPLIT > 1 ? H : 0, C::NCH);
      __syncthreads();
      if (more) load_part(k0 + BN, yes, no, 0, H);
      auto kmid = [&] {
        if constexpr (SPLIT > 1) {
          if (more) {
            store_part(0, yes, no, 0, H);  // K_i's readers all passed barrier 1
            load_part(k0 + BN, yes, no, H, C::NCH);
          }
        }
      };
      if (active) softmax_pv(0, k0, acc, kmid);
      else kmid();
      if (more) store_part(0, yes, no, SPLIT > 1 ? H : 0, C::NCH);
      __syncthreads();
    }
  } else if constexpr (DBUF) {
    load_tile(0);
    store_tile(0);
    __syncthreads();
    if (ntiles > 1) load_tile(BN);
    for (int it = 0; it < ntiles; ++it) {
      const int k0 = it * BN;
      if (k0 <= whi) compute(it & 1, k0);
      if (it + 1 < ntiles) {
        store_tile((it + 1) & 1);  // its last reader was tile it - 1, before the previous barrier
        if (it + 2 < ntiles) load_tile(k0 + 2 * BN);
      }
      __syncthreads();
    }
  } else {
    load_tile(0);
    for (int it = 0; it < ntiles; ++it) {
      const int k0 = it * BN;
      store_tile(0);
      __syncthreads();
      if (it + 1 < ntiles) load_tile(k0 + BN);  // in flight while this tile is computed
      if (k0 <= whi) compute(0, k0);
      __syncthreads();
    }
  }

  // Normalise and write this warp's rows through its own (no longer needed) Q rows.
  float inv[RF][2];
#pragma unroll
  for (int f = 0; f < RF; ++f)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_run[f][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      inv[f][h] = l > 0.f ? kv_unit<KIND>() / l : 0.f;
    }
#pragma unroll
  for (int f = 0; f < RF; ++f)
#pragma unroll
    for (int n = 0; n < ND; ++n)
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        const int h = (e >> 1) & 1;
        const int row = wrow + f * 16 + g + 8 * h, col = n * 16 + 2 * t + 8 * (e >> 2);
        *reinterpret_cast<uint32_t*>(sQ + row * C::LDQ + col) =
            pack_half2(o[f][n].x[e] * inv[f][h], o[f][n].x[e + 1] * inv[f][h]);
      }
  __syncwarp();
  for (int i = lane; i < C::RW * (D / 8); i += 32) {
    const int r = i / (D / 8), c = (i % (D / 8)) * 8;
    const int orow = sRowOut[wrow + r];
    if (orow < 0) continue;
    *reinterpret_cast<uint4*>(p.out + static_cast<size_t>(orow) * D + c) =
        *reinterpret_cast<const uint4*>(sQ + (wrow + r) * C::LDQ + c);
  }
}

}  // namespace revolta
