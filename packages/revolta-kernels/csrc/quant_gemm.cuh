// Tensor-core quantized GEMM for prefill (M > 8): y[M, N] = x[M, K] @ W[K, N], fp32 accumulation.
// sm_70 features only (WMMA 16x16x16 -> HMMA; no cp.async/ldmatrix). Layout and dequantization: see
// quant_common.cuh; the skinny decode kernel is in quant_gemv.cuh.
//
// Block tile BM x BN, K step BK, WM x WN warps each owning a (BM / WM) x (BN / WN) accumulator tile. The
// next K step's activations (16-byte loads) and packed weights (one 8/16-byte load per thread) plus its
// scales and zero points are fetched into registers while the current step is multiplied; the weights are
// then dequantized to fp16 on their way into the other shared buffer (one barrier per K step). A thread's
// packed row lies in one group (G % PACK == 0), so any BK works with any group size that divides K.
#pragma once

#include <mma.h>

#include "quant_common.cuh"
#include "quant_gemv_kernels.cuh"

namespace revolta {

template <int BITS, int BM, int BN, int BK, int WM, int WN>
struct GemmCfg {
  static constexpr int THREADS = WM * WN * 32;
  static constexpr int PACK = 32 / BITS, PAIRS = PACK / 2;
  static constexpr int LDA = BK + 8, LDB = BN + 8;  // +16 bytes per row against bank conflicts
  static constexpr int FM = BM / WM / 16, FN = BN / WN / 16;
  static constexpr int A_CHUNKS = BM * BK / 8 / THREADS;       // 16-byte activation loads per thread
  static constexpr int WPT = (BK / PACK) * BN / THREADS;        // packed words (columns) per thread
  static constexpr int ROW_THREADS = BN / WPT;                  // threads per packed row
  static constexpr int STAGE = BM * LDA + BK * LDB;             // halves per shared buffer
  static constexpr int SMEM = 2 * STAGE * 2;                    // bytes, double buffered
  static_assert(BM * BK / 8 % THREADS == 0 && (BK / PACK) * BN % THREADS == 0, "tile does not split evenly");
  static_assert(WPT == 2 || WPT == 4 || WPT == 8, "2, 4 or 8 packed words per thread");
  static_assert(SMEM >= THREADS / 32 * 16 * 16 * 4, "epilogue scratch must fit in the buffers");
};

template <int BITS, int BM, int BN, int BK, int WM, int WN>
__device__ const int quant_gemm_smem_bytes = GemmCfg<BITS, BM, BN, BK, WM, WN>::SMEM;

template <int N> struct HalfVec;  // N consecutive halves as one vector (scales of a thread's columns)
template <> struct HalfVec<2> { using type = uint32_t; };
template <> struct HalfVec<4> { using type = uint2; };
template <> struct HalfVec<8> { using type = uint4; };

template <int N>
__device__ __forceinline__ void store_halves(__half* dst, const __half2 (&v)[N / 2]) {
  if constexpr (N == 2) {
    *reinterpret_cast<uint32_t*>(dst) = h2u(v[0]);
  } else if constexpr (N == 4) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(h2u(v[0]), h2u(v[1]));
  } else {
    *reinterpret_cast<uint4*>(dst) = make_uint4(h2u(v[0]), h2u(v[1]), h2u(v[2]), h2u(v[3]));
  }
}

// Where a mapped tile (quant_gemm_tile<..., true>: the sorted-rows MoE GEMM, quant_moe_gemm.cuh) finds its rows.
// The tile's local row r is sorted row `row0 + r` of the call. Its A row is x row x_rows[row0 + r] / x_row_div
// (a gather; row0 + r without x_rows), each row K halves. Its result goes to out row out_rows[row0 + r] (a scatter;
// row0 + r without out_rows). An index outside x (x_limit rows) reads zeros, one outside out (out_limit
// rows) is not written, so no index takes the kernel outside its tensors.
struct GemmRowMap {
  const long long* x_rows;
  const long long* out_rows;
  long long row0, x_limit, out_limit;
  int x_row_div;
};

// Sorted row g's output row under `map` (-1: outside out).
__device__ __forceinline__ long long mapped_out_row(const GemmRowMap& map, long long g) {
  const long long r = map.out_rows != nullptr ? map.out_rows[g] : g;
  return r >= 0 && r < map.out_limit ? r : -1;
}

// The block's BM x BN output tile at (m0, n0): the whole K loop and the epilogue (every thread of the block).
// MAPPED: rows through `map` (above), with p.x and p.out the whole tensors; otherwise x[m0 + r] and out[m0 + r].
// SILU_OUT (mapped only): W's N columns are [gate (N / 2), up (N / 2)] and the block writes silu(gate) * up, out
// [R, N / 2], for the BN / 2 output columns at n0 / 2: its first BN / 2 columns of W are those gate columns, the rest
// the matching up columns. Each output is rounded to fp16 as the GEMM rounds it, then SiLU-and-mul'd as
// revolta::silu_and_mul does: bit for bit the GEMM followed by that op.
template <int BITS, int BM, int BN, int BK, int WM, int WN, bool MAPPED = false, bool SILU_OUT = false>
__device__ __forceinline__ void quant_gemm_tile(const QuantGemmParams& p, int m0, int n0,
                                                const GemmRowMap& map = GemmRowMap{}) {
  static_assert(MAPPED || !SILU_OUT, "the SiLU-and-mul epilogue is the mapped tile's");
  using namespace nvcuda;
  using C = GemmCfg<BITS, BM, BN, BK, WM, WN>;
  constexpr int PACK = C::PACK, PAIRS = C::PAIRS, WPT = C::WPT;
  constexpr int ZWORDS = (WPT * BITS + 31) / 32;  // zero-point words covering a thread's columns
  extern __shared__ __align__(128) unsigned char gemm_smem[];
  __half* smem = reinterpret_cast<__half*>(gemm_smem);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp / WN, wn = warp % WN;
  const int b_row = tid / C::ROW_THREADS, b_col = (tid % C::ROW_THREADS) * WPT;
  constexpr int HALF_BN = BN / 2;
  const int half_n = p.N / 2, c0 = n0 / 2;  // SILU_OUT: gate columns c0 + j and up columns half_n + c0 + j
  // N % 8 == 0 (SILU_OUT: N / 2 % 8 == 0) and WPT | 8: a thread's columns are all in or all out
  const int b_n = SILU_OUT ? (b_col < HALF_BN ? c0 + b_col : half_n + c0 + b_col - HALF_BN) : n0 + b_col;
  const bool b_ok = SILU_OUT ? c0 + b_col % HALF_BN < half_n : b_n < p.N;
  const int ktiles = p.K / BK;

  uint4 a_reg[C::A_CHUNKS];
  // MAPPED: each A chunk's source row (null: zeros), fixed over the K loop.
  const __half* a_src[MAPPED ? C::A_CHUNKS : 1];
  if constexpr (MAPPED) {
#pragma unroll
    for (int i = 0; i < C::A_CHUNKS; ++i) {
      const int row = (tid + i * C::THREADS) / (BK / 8);
      a_src[i] = nullptr;
      if (m0 + row < p.M) {
        const long long g = map.row0 + m0 + row;
        const long long raw = map.x_rows != nullptr ? map.x_rows[g] : g;
        const long long src = raw >= 0 ? raw / map.x_row_div : -1;  // (C's division truncates -1 / 2 to row 0)
        if (src >= 0 && src < map.x_limit) a_src[i] = p.x + src * p.K;
      }
    }
  }
  uint32_t b_reg[WPT];
  typename HalfVec<WPT>::type s_reg;
  uint32_t z_reg[ZWORDS];

  auto fetch = [&](int kt) {
    const int k0 = kt * BK;
#pragma unroll
    for (int i = 0; i < C::A_CHUNKS; ++i) {
      const int chunk = tid + i * C::THREADS, row = chunk / (BK / 8), kc = (chunk % (BK / 8)) * 8;
      if constexpr (MAPPED) {
        a_reg[i] = a_src[i] != nullptr ? __ldg(reinterpret_cast<const uint4*>(a_src[i] + k0 + kc))
                                       : make_uint4(0, 0, 0, 0);
      } else {
        a_reg[i] = m0 + row < p.M
                       ? __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(m0 + row) * p.K + k0 + kc))
                       : make_uint4(0, 0, 0, 0);
      }
    }
    if (b_ok) {
      const int r = k0 / PACK + b_row;
      const uint32_t* src = p.qweight + static_cast<size_t>(r) * p.N + b_n;
#pragma unroll
      for (int c = 0; c < WPT; c += 4) {
        if constexpr (WPT == 2) {
          const uint2 v = __ldg(reinterpret_cast<const uint2*>(src));
          b_reg[0] = v.x; b_reg[1] = v.y;
        } else {
          const uint4 v = __ldg(reinterpret_cast<const uint4*>(src + c));
          b_reg[c] = v.x; b_reg[c + 1] = v.y; b_reg[c + 2] = v.z; b_reg[c + 3] = v.w;
        }
      }
      const int g = r * PACK / p.group_size;
      s_reg = __ldg(reinterpret_cast<const typename HalfVec<WPT>::type*>(p.scales + static_cast<size_t>(g) * p.N + b_n));
#pragma unroll
      for (int j = 0; j < ZWORDS; ++j) z_reg[j] = __ldg(p.qzeros + static_cast<size_t>(g) * (p.N / PACK) + b_n / PACK + j);
    }
  };
  auto stash = [&](int buf) {
    __half* As = smem + buf * C::STAGE;
    __half* Bs = As + BM * C::LDA;
#pragma unroll
    for (int i = 0; i < C::A_CHUNKS; ++i) {
      const int chunk = tid + i * C::THREADS, row = chunk / (BK / 8), kc = (chunk % (BK / 8)) * 8;
      *reinterpret_cast<uint4*>(As + row * C::LDA + kc) = a_reg[i];
    }
    const __half* sh = reinterpret_cast<const __half*>(&s_reg);
    __half2 rows[PACK][WPT / 2];  // rows[k][j]: columns (2j, 2j + 1) of packed-row field k
#pragma unroll
    for (int c = 0; c < WPT; c += 2) {
      __half2 da[PAIRS], db[PAIRS];
      const int za = zero_field<BITS>(z_reg[(c * BITS) / 32], b_n + c, p.zero_offset);
      const int zb = zero_field<BITS>(z_reg[((c + 1) * BITS) / 32], b_n + c + 1, p.zero_offset);
      dequant_word<BITS>(b_reg[c], col_quant(za, sh[c]), da);
      dequant_word<BITS>(b_reg[c + 1], col_quant(zb, sh[c + 1]), db);
#pragma unroll
      for (int i = 0; i < PAIRS; ++i) {
        rows[i][c / 2] = b_ok ? __lows2half2(da[i], db[i]) : __float2half2_rn(0.f);
        rows[i + PAIRS][c / 2] = b_ok ? __highs2half2(da[i], db[i]) : __float2half2_rn(0.f);
      }
    }
#pragma unroll
    for (int k = 0; k < PACK; ++k) store_halves<WPT>(Bs + (b_row * PACK + k) * C::LDB + b_col, rows[k]);
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[C::FM][C::FN];
#pragma unroll
  for (int i = 0; i < C::FM; ++i)
#pragma unroll
    for (int j = 0; j < C::FN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  fetch(0);
  stash(0);
  __syncthreads();
  for (int kt = 0; kt < ktiles; ++kt) {
    const int buf = kt & 1;
    const __half* As = smem + buf * C::STAGE;
    const __half* Bs = As + BM * C::LDA;
    if (kt + 1 < ktiles) fetch(kt + 1);
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b[C::FN];
#pragma unroll
      for (int j = 0; j < C::FN; ++j)
        wmma::load_matrix_sync(b[j], Bs + kk * 16 * C::LDB + wn * (BN / WN) + j * 16, C::LDB);
#pragma unroll
      for (int i = 0; i < C::FM; ++i) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::load_matrix_sync(a, As + (wm * (BM / WM) + i * 16) * C::LDA + kk * 16, C::LDA);
#pragma unroll
        for (int j = 0; j < C::FN; ++j) wmma::mma_sync(acc[i][j], a, b[j], acc[i][j]);
      }
    }
    if (kt + 1 < ktiles) stash(buf ^ 1);
    __syncthreads();
  }

  // Epilogue: the fragments go through this warp's scratch, 16x16 at a time.
  float* cs = reinterpret_cast<float*>(gemm_smem) + warp * 256;
  if constexpr (SILU_OUT) {  // the rounded tile in shared memory, then each gate / up pair
    constexpr int LDH = BN + 8;
    static_assert(C::THREADS / 32 * 256 * 4 + BM * LDH * 2 <= C::SMEM, "the epilogue's tile must fit");
    __half* hs = reinterpret_cast<__half*>(gemm_smem + C::THREADS / 32 * 256 * 4);
#pragma unroll
    for (int i = 0; i < C::FM; ++i) {
#pragma unroll
      for (int j = 0; j < C::FN; ++j) {
        wmma::store_matrix_sync(cs, acc[i][j], 16, wmma::mem_row_major);
        __syncwarp();
        const int r = lane / 2, c = (lane % 2) * 8;
        __align__(16) __half h[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) h[e] = __float2half_rn(cs[r * 16 + c + e]);
        *reinterpret_cast<uint4*>(hs + (wm * (BM / WM) + i * 16 + r) * LDH + wn * (BN / WN) + j * 16 + c) =
            *reinterpret_cast<uint4*>(h);
        __syncwarp();
      }
    }
    __syncthreads();
    for (int idx = tid; idx < BM * (HALF_BN / 8); idx += C::THREADS) {
      const int lr = idx / (HALF_BN / 8), lc = (idx % (HALF_BN / 8)) * 8;
      const int row = m0 + lr, col = c0 + lc;
      if (row >= p.M || col >= half_n) continue;
      const long long orow = mapped_out_row(map, map.row0 + row);
      if (orow < 0) continue;
      const uint4 g = *reinterpret_cast<const uint4*>(hs + lr * LDH + lc);
      const uint4 u = *reinterpret_cast<const uint4*>(hs + lr * LDH + HALF_BN + lc);
      *reinterpret_cast<uint4*>(p.out + static_cast<size_t>(orow) * half_n + col) =
          make_uint4(silu_mul_h2(g.x, u.x), silu_mul_h2(g.y, u.y), silu_mul_h2(g.z, u.z), silu_mul_h2(g.w, u.w));
    }
  } else {  // each fragment straight out, 8 consecutive outputs per lane
#pragma unroll
    for (int i = 0; i < C::FM; ++i) {
#pragma unroll
      for (int j = 0; j < C::FN; ++j) {
        wmma::store_matrix_sync(cs, acc[i][j], 16, wmma::mem_row_major);
        __syncwarp();
        const int r = lane / 2, c = (lane % 2) * 8;
        const int row = m0 + wm * (BM / WM) + i * 16 + r, col = n0 + wn * (BN / WN) + j * 16 + c;
        if (row < p.M && col < p.N) {
          __align__(16) __half h[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) h[e] = __float2half_rn(cs[r * 16 + c + e]);
          if constexpr (MAPPED) {
            const long long orow = mapped_out_row(map, map.row0 + row);
            if (orow >= 0)
              *reinterpret_cast<uint4*>(p.out + static_cast<size_t>(orow) * p.N + col) = *reinterpret_cast<uint4*>(h);
          } else {
            *reinterpret_cast<uint4*>(p.out + static_cast<size_t>(row) * p.N + col) = *reinterpret_cast<uint4*>(h);
          }
        }
        __syncwarp();
      }
    }
  }
}

template <int BITS, int BM, int BN, int BK, int WM, int WN>
__global__ void __launch_bounds__(WM * WN * 32) quant_gemm_kernel(QuantGemmParams p) {
  quant_gemm_tile<BITS, BM, BN, BK, WM, WN>(p, blockIdx.y * BM, blockIdx.x * BN);
}

}  // namespace revolta
