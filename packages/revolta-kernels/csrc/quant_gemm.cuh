// Weight-only int4/int8 group-quantized GEMM, y[M, N] = x[M, K] @ W[K, N], fp16 activations, fp32 accumulation.
// Self-contained for NVRTC (CUDA headers only); sm_70 features only: fp16 math, WMMA, no cp.async/ldmatrix.
//
// Weight layout (see revolta_kernels/reference/quant.py): qweight int32 [K / PACK, N] packed along K (field j of
// word [r, n] is row r * PACK + j), scales fp16 [K / G, N], qzeros int32 [K / G, N / PACK] packed along N;
// W[k, n] = (q - (z + zero_offset)) * s. Merged projections (q/k/v, gate/up) are one call over concatenated N.
//
// Dequantization: a field q (< 256) OR-ed into the mantissa of 1024.0h (0x6400) is exactly 1024 + q, so two
// fields become one half2 with a shift, a mask and an OR; subtracting 1024 + z (exact) and multiplying by the
// scale rounds once, giving the same fp16 weight as a dense fp16 checkpoint would hold.
#pragma once

#include <cuda_fp16.h>
#include <mma.h>
#if defined(__CUDACC_RTC__)
typedef unsigned int uint32_t;  // NVRTC has no C library headers
#else
#include <stdint.h>
#endif

namespace revolta {

struct QuantGemmParams {
  const __half* x;          // [M, K]
  const uint32_t* qweight;  // [K / PACK, N]
  const __half* scales;     // [K / G, N]
  const uint32_t* qzeros;   // [K / G, N / PACK]
  __half* out;              // [M, N]
  float* partial;           // [splits, M, N] fp32 partial sums of the skinny kernel (splits > 1)
  int M, N, K, group_size, zero_offset, rows_per_split;
};

// Fields i and i + PACK / 2 of `w` as half2 (1024 + q_i, 1024 + q_{i + PACK/2}).
template <int BITS>
__device__ __forceinline__ __half2 q_pair(uint32_t w, int i) {
  constexpr uint32_t MASK = BITS == 4 ? 0x000F000Fu : 0x00FF00FFu;
  uint32_t v = ((w >> (BITS * i)) & MASK) | 0x64006400u;
  return *reinterpret_cast<__half2*>(&v);
}

template <int BITS>
__device__ __forceinline__ __half zero_of(const uint32_t* qzeros, int row_words, int g, int n, int offset) {
  constexpr int PACK = 32 / BITS;
  const uint32_t word = __ldg(qzeros + static_cast<size_t>(g) * row_words + n / PACK);
  const int z = static_cast<int>((word >> (BITS * (n % PACK))) & ((1u << BITS) - 1u)) + offset;
  return __int2half_rn(1024 + z);
}

// ---- skinny GEMM (decode, M <= 8): one warp = 128 columns (4 per lane, one uint4 of qweight per packed row),
// the block's 4 warps take contiguous slices of the block's K range; blockIdx.y splits K when N is small.
constexpr int kGemvWarps = 4;
constexpr int kGemvCols = 128;
constexpr int kGemvUnroll = 4;

template <int BITS, int MT>
__global__ void __launch_bounds__(kGemvWarps * 32) quant_gemv_kernel(QuantGemmParams p) {
  constexpr int PACK = 32 / BITS, PAIRS = PACK / 2;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n0 = blockIdx.x * kGemvCols + lane * 4;
  const int rows = p.K / PACK;
  const int r_begin = blockIdx.y * p.rows_per_split;
  const int r_end = min(rows, r_begin + p.rows_per_split);
  const int per_warp = (r_end - r_begin + kGemvWarps - 1) / kGemvWarps;
  const int w0 = r_begin + warp * per_warp, w1 = min(r_end, w0 + per_warp);
  const int group_rows = p.group_size / PACK;
  float acc[MT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[m][c] = 0.f;

  if (n0 < p.N) {
    __half2 s2[4], z2[4];
    // One packed row: x pairs of every row m (rows past M re-read row M - 1; their sums are never stored),
    // dequantize 4 columns x PACK values in half2, dot in fp16 pairs, accumulate in fp32.
    auto row = [&](int r, const uint4 wq) {
      __half2 xp[MT][PAIRS];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        __align__(16) __half xh[PACK];
        const __half* xr = p.x + static_cast<size_t>(m < p.M ? m : p.M - 1) * p.K + r * PACK;
        if constexpr (PACK == 8) {
          *reinterpret_cast<uint4*>(xh) = __ldg(reinterpret_cast<const uint4*>(xr));
        } else {
          *reinterpret_cast<uint2*>(xh) = __ldg(reinterpret_cast<const uint2*>(xr));
        }
#pragma unroll
        for (int i = 0; i < PAIRS; ++i) xp[m][i] = __halves2half2(xh[i], xh[i + PAIRS]);
      }
      const uint32_t words[4] = {wq.x, wq.y, wq.z, wq.w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        __half2 w[PAIRS];
#pragma unroll
        for (int i = 0; i < PAIRS; ++i) w[i] = __hmul2(__hsub2(q_pair<BITS>(words[c], i), z2[c]), s2[c]);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          __half2 d = __hmul2(w[0], xp[m][0]);
#pragma unroll
          for (int i = 1; i < PAIRS; ++i) d = __hfma2(w[i], xp[m][i], d);
          const float2 f = __half22float2(d);
          acc[m][c] += f.x + f.y;
        }
      }
    };
    const uint32_t* qcol = p.qweight + n0;
    auto fetch = [&](int r, uint4 (&dst)[kGemvUnroll]) {
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u)
        dst[u] = r + u < w1 ? __ldg(reinterpret_cast<const uint4*>(qcol + static_cast<size_t>(r + u) * p.N))
                            : make_uint4(0, 0, 0, 0);
    };
    // Register double buffer: the next kGemvUnroll rows' weights are requested before this chunk is used.
    uint4 next[kGemvUnroll];
    if (w0 < w1) fetch(w0, next);
    int cur_g = -1;
    for (int r = w0; r < w1; r += kGemvUnroll) {
      uint4 now[kGemvUnroll];
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) now[u] = next[u];
      if (r + kGemvUnroll < w1) fetch(r + kGemvUnroll, next);
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        if (r + u >= w1) break;
        const int g = (r + u) / group_rows;
        if (g != cur_g) {  // warp-uniform; every group_size / PACK rows
          cur_g = g;
          const uint2 sv = __ldg(reinterpret_cast<const uint2*>(p.scales + static_cast<size_t>(g) * p.N + n0));
          const __half* sh = reinterpret_cast<const __half*>(&sv);
          // The 4 columns' zero points share one word (n0 % 4 == 0, PACK >= 4).
          const uint32_t zw = __ldg(p.qzeros + static_cast<size_t>(g) * (p.N / PACK) + n0 / PACK);
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            s2[c] = __half2half2(sh[c]);
            const int z = static_cast<int>((zw >> (BITS * ((n0 + c) % PACK))) & ((1u << BITS) - 1u));
            z2[c] = __half2half2(__int2half_rn(1024 + z + p.zero_offset));
          }
        }
        row(r + u, now[u]);
      }
    }
  }

  __shared__ float red[kGemvWarps][MT][kGemvCols];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) red[warp][m][lane * 4 + c] = acc[m][c];
  __syncthreads();
  for (int idx = threadIdx.x; idx < MT * kGemvCols; idx += blockDim.x) {
    const int m = idx / kGemvCols, col = idx % kGemvCols, n = blockIdx.x * kGemvCols + col;
    if (m >= p.M || n >= p.N) continue;
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kGemvWarps; ++w) s += red[w][m][col];
    if (gridDim.y == 1) {
      p.out[static_cast<size_t>(m) * p.N + n] = __float2half_rn(s);
    } else {
      p.partial[(static_cast<size_t>(blockIdx.y) * p.M + m) * p.N + n] = s;
    }
  }
}

// Sum of the split-K partials (in split order: deterministic) into fp16.
__global__ void quant_splitk_reduce_kernel(const float* __restrict__ partial, __half* __restrict__ out, int mn,
                                           int splits) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= mn) return;
  float s = 0.f;
  for (int k = 0; k < splits; ++k) s += partial[static_cast<size_t>(k) * mn + i];
  out[i] = __float2half_rn(s);
}

// ---- tensor-core GEMM (prefill): 128x128 tile, BK = 32 (inside one group: G % 32 == 0), 8 warps of 64x32
// (4x2 WMMA 16x16x16 fragments, fp32 accumulators). Next tile's x and packed weights are fetched into registers
// while the current one is multiplied, then dequantized to fp16 on their way into the other shared buffer.
constexpr int kGemmBM = 128, kGemmBN = 128, kGemmBK = 32, kGemmThreads = 256;
constexpr int kGemmLDA = kGemmBK + 8, kGemmLDB = kGemmBN + 8;

template <int BITS>
__global__ void __launch_bounds__(kGemmThreads) quant_gemm_kernel(QuantGemmParams p) {
  using namespace nvcuda;
  constexpr int PACK = 32 / BITS, PAIRS = PACK / 2;
  constexpr int WPT = (kGemmBK / PACK) * kGemmBN / kGemmThreads;  // words per thread: 2 (int4), 4 (int8)
  constexpr int COLS_PER_ROW = kGemmBN / WPT;                       // threads per packed row
  __shared__ __align__(32) __half As[2][kGemmBM][kGemmLDA];
  __shared__ __align__(32) __half Bs[2][kGemmBK][kGemmLDB];
  __shared__ __align__(32) float Cs[kGemmThreads / 32][16][16];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int m0 = blockIdx.y * kGemmBM, n0 = blockIdx.x * kGemmBN;
  const int wm = warp / 4, wn = warp % 4;
  const int b_row = tid / COLS_PER_ROW, b_col = (tid % COLS_PER_ROW) * WPT;
  const bool b_ok = n0 + b_col < p.N;
  const int ktiles = p.K / kGemmBK;

  uint4 a_reg[2];
  uint32_t b_reg[WPT];
  __half s_reg[WPT], z_reg[WPT];

  auto fetch = [&](int kt) {
    const int k0 = kt * kGemmBK;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int chunk = tid + i * kGemmThreads, row = chunk / (kGemmBK / 8), kc = (chunk % (kGemmBK / 8)) * 8;
      a_reg[i] = m0 + row < p.M
                     ? __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(m0 + row) * p.K + k0 + kc))
                     : make_uint4(0, 0, 0, 0);
    }
    if (b_ok) {
      const uint32_t* src = p.qweight + static_cast<size_t>(k0 / PACK + b_row) * p.N + n0 + b_col;
      if constexpr (WPT == 2) {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(src));
        b_reg[0] = v.x; b_reg[1] = v.y;
      } else {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
        b_reg[0] = v.x; b_reg[1] = v.y; b_reg[2] = v.z; b_reg[3] = v.w;
      }
      const int g = k0 / p.group_size;
#pragma unroll
      for (int c = 0; c < WPT; ++c) {
        s_reg[c] = p.scales[static_cast<size_t>(g) * p.N + n0 + b_col + c];
        z_reg[c] = zero_of<BITS>(p.qzeros, p.N / PACK, g, n0 + b_col + c, p.zero_offset);
      }
    }
  };
  auto stash = [&](int buf) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int chunk = tid + i * kGemmThreads, row = chunk / (kGemmBK / 8), kc = (chunk % (kGemmBK / 8)) * 8;
      *reinterpret_cast<uint4*>(&As[buf][row][kc]) = a_reg[i];
    }
#pragma unroll
    for (int c = 0; c < WPT; c += 2) {
      const __half2 sa = __half2half2(s_reg[c]), sb = __half2half2(s_reg[c + 1]);
      const __half2 za = __half2half2(z_reg[c]), zb = __half2half2(z_reg[c + 1]);
#pragma unroll
      for (int i = 0; i < PAIRS; ++i) {
        __half2 va = __hmul2(__hsub2(q_pair<BITS>(b_reg[c], i), za), sa);
        __half2 vb = __hmul2(__hsub2(q_pair<BITS>(b_reg[c + 1], i), zb), sb);
        if (!b_ok) va = vb = __float2half2_rn(0.f);
        *reinterpret_cast<__half2*>(&Bs[buf][b_row * PACK + i][b_col + c]) = __lows2half2(va, vb);
        *reinterpret_cast<__half2*>(&Bs[buf][b_row * PACK + i + PAIRS][b_col + c]) = __highs2half2(va, vb);
      }
    }
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  fetch(0);
  stash(0);
  __syncthreads();
  for (int kt = 0; kt < ktiles; ++kt) {
    const int buf = kt & 1;
    if (kt + 1 < ktiles) fetch(kt + 1);
#pragma unroll
    for (int kk = 0; kk < kGemmBK / 16; ++kk) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &Bs[buf][kk * 16][wn * 32 + j * 16], kGemmLDB);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::load_matrix_sync(a, &As[buf][wm * 64 + i * 16][kk * 16], kGemmLDA);
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a, b[j], acc[i][j]);
      }
    }
    if (kt + 1 < ktiles) stash(buf ^ 1);
    __syncthreads();
  }

  // Epilogue: one 16x16 fragment at a time through this warp's scratch, 8 consecutive outputs per lane.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(&Cs[warp][0][0], acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      const int r = lane / 2, c = (lane % 2) * 8;
      const int row = m0 + wm * 64 + i * 16 + r, col = n0 + wn * 32 + j * 16 + c;
      if (row < p.M && col < p.N) {
        __align__(16) __half h[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) h[e] = __float2half_rn(Cs[warp][r][c + e]);
        *reinterpret_cast<uint4*>(p.out + static_cast<size_t>(row) * p.N + col) = *reinterpret_cast<uint4*>(h);
      }
      __syncwarp();
    }
  }
}

}  // namespace revolta
