// The tensor-core fragment layout that the "mma" attention kernels (decode_mma.cuh, prefill_mma.cuh)
// rely on, and the probe kernel that checks it on the running GPU.
//
// WMMA leaves the mapping of fragment elements to matrix (row, column) unspecified. The mma kernels use
// one concrete mapping for 16x16x16 f16 WMMA (the register layout of mma.m16n8k16, which nvcc uses for
// WMMA on sm_80 and later). With g = lane / 4 and t = lane % 4, element i of
//   accumulator (float) and matrix_a (row-major):  row g + 8 * ((i >> 1) & 1),  col 2t + (i & 1) + 8 * (i >> 2)
//   matrix_b (row- or column-major), (k, n):       k 2t + (i & 1) + 8 * ((i >> 1) & 1),  n g + 8 * (i >> 2)
// (f16 fragments carry 16 halves; the layout covers elements 0..7, see frag_set_words.)
// Under it an S = Q K^T accumulator turns element by element into the matrix_a fragment of P for P V
// (no shared-memory round trip), rows are reduced with two quad shuffles, and cache bytes can be
// dequantised straight into matrix_b fragments. The code is plain WMMA, so it compiles (and is
// checked) for sm_70 too; but Volta's HMMA.884 fragments are laid out differently, so the host runs
// wmma_layout_probe_kernel once per device (revolta_mma_layout_probe) and launches the mma kernels
// only where every fragment type matches. Everywhere else the generic kernels run.
#pragma once

#include <mma.h>
#include "common.cuh"

namespace revolta {

using FragAcc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
using FragA = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major>;
using FragBCol = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __half, nvcuda::wmma::col_major>;
using FragBRow = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __half, nvcuda::wmma::row_major>;

// Accumulator / matrix_a element i -> (row, col); matrix_b element i -> (k, n).
__host__ __device__ constexpr int frag_ac_row(int lane, int i) { return (lane >> 2) + 8 * ((i >> 1) & 1); }
__host__ __device__ constexpr int frag_ac_col(int lane, int i) { return 2 * (lane & 3) + (i & 1) + 8 * (i >> 2); }
__host__ __device__ constexpr int frag_b_k(int lane, int i) { return 2 * (lane & 3) + (i & 1) + 8 * ((i >> 1) & 1); }
__host__ __device__ constexpr int frag_b_n(int lane, int i) { return (lane >> 2) + 8 * (i >> 2); }

// f16 fragments are declared with 16 halves (8 registers) on every arch, but under the layout above the
// MMA reads only the first four words (elements 0..7). The mma kernels write those four words and
// repeat them in words 4..7, so a fragment stays valid if an arch reads either copy; the probe runs an
// MMA on fragments built exactly this way.
template <typename Frag>
__device__ __forceinline__ void frag_set_words(Frag& f, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  uint32_t* w = reinterpret_cast<uint32_t*>(&f.x[0]);
  w[0] = w0;
  w[1] = w1;
  w[2] = w2;
  w[3] = w3;
  if constexpr (Frag::num_elements == 16) {
    w[4] = w0;
    w[5] = w1;
    w[6] = w2;
    w[7] = w3;
  }
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// 2^x on the special-function unit (PTX ex2.approx, every arch); relative error ~2^-22, -inf -> +0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Small integer test matrices: every product and sum is exact in fp16/fp32.
__device__ __forceinline__ float probe_a(int r, int k) { return static_cast<float>((r * 3 + k * 5) % 7 - 3); }
__device__ __forceinline__ float probe_b(int k, int n) { return static_cast<float>((k * 2 + n * 3) % 5 - 2); }

// One warp. out[0] = 1 when the GPU's fragments behave as the mma kernels assume: the accumulator loads
// in the layout above (num_elements 8), and MMAs on fragments built by hand with frag_set_words (A with
// column-/row-major B, and hand-built A with a row-major B loaded by load_matrix_sync, as prefill's P V
// does) produce the right products in that layout. out[1 + 512 * f + 16 * lane + i] = what element i of
// lane holds after load_matrix_sync of fragment f (0 accumulator, 1 matrix_a, 2 matrix_b col-major,
// 3 matrix_b row-major) from a matrix of row * 16 + col (or k * 16 + n), -1 past num_elements; for
// diagnostics. (A template only so that every translation unit including this header may define it.)
template <int UNUSED = 0>
__global__ void __launch_bounds__(32) wmma_layout_probe_kernel(int* out) {
  using namespace nvcuda;
  __shared__ float s_acc[256];
  __shared__ __half s_a[256], s_bc[256], s_br[256], s_pb[256];
  const int lane = threadIdx.x;
  for (int e = lane; e < 256; e += 32) {
    const int r = e / 16, c = e % 16;
    s_acc[e] = static_cast<float>(e);       // (row r, col c) row-major
    s_a[e] = __int2half_rn(e);              // (row r, k c) row-major
    s_bc[e] = __int2half_rn(c * 16 + r);    // col-major: (k = c, n = r) at n * 16 + k
    s_br[e] = __int2half_rn(e);             // row-major: (k = r, n = c) at k * 16 + n
    s_pb[e] = __float2half_rn(probe_b(r, c));  // probe_b row-major
  }
  __syncwarp();
  FragAcc acc;
  FragA a;
  FragBCol bc;
  FragBRow br, pb;
  wmma::load_matrix_sync(acc, s_acc, 16, wmma::mem_row_major);
  wmma::load_matrix_sync(a, s_a, 16);
  wmma::load_matrix_sync(bc, s_bc, 16);
  wmma::load_matrix_sync(br, s_br, 16);
  wmma::load_matrix_sync(pb, s_pb, 16);
  for (int i = 0; i < 16; ++i) {
    out[1 + 512 * 0 + 16 * lane + i] = i < FragAcc::num_elements ? static_cast<int>(acc.x[i]) : -1;
    out[1 + 512 * 1 + 16 * lane + i] = i < FragA::num_elements ? __half2int_rn(a.x[i]) : -1;
    out[1 + 512 * 2 + 16 * lane + i] = i < FragBCol::num_elements ? __half2int_rn(bc.x[i]) : -1;
    out[1 + 512 * 3 + 16 * lane + i] = i < FragBRow::num_elements ? __half2int_rn(br.x[i]) : -1;
  }
  bool ok = FragAcc::num_elements == 8;
  for (int i = 0; i < 8 && ok; ++i)
    ok = static_cast<int>(acc.x[i]) == frag_ac_row(lane, i) * 16 + frag_ac_col(lane, i);

  uint32_t aw[4], bw[4];
  for (int w = 0; w < 4; ++w) {
    const int i = 2 * w;
    aw[w] = pack_half2(probe_a(frag_ac_row(lane, i), frag_ac_col(lane, i)),
                       probe_a(frag_ac_row(lane, i + 1), frag_ac_col(lane, i + 1)));
    bw[w] = pack_half2(probe_b(frag_b_k(lane, i), frag_b_n(lane, i)), probe_b(frag_b_k(lane, i + 1), frag_b_n(lane, i + 1)));
  }
  FragA ha;
  FragBCol hbc;
  FragBRow hbr;
  frag_set_words(ha, aw[0], aw[1], aw[2], aw[3]);
  frag_set_words(hbc, bw[0], bw[1], bw[2], bw[3]);
  frag_set_words(hbr, bw[0], bw[1], bw[2], bw[3]);
  FragAcc c[3];
  for (int j = 0; j < 3; ++j) wmma::fill_fragment(c[j], 0.f);
  wmma::mma_sync(c[0], ha, hbc, c[0]);
  wmma::mma_sync(c[1], ha, hbr, c[1]);
  wmma::mma_sync(c[2], ha, pb, c[2]);
  for (int i = 0; i < 8; ++i) {
    const int r = frag_ac_row(lane, i), n = frag_ac_col(lane, i);
    float want = 0.f;
    for (int k = 0; k < 16; ++k) want += probe_a(r, k) * probe_b(k, n);
    for (int j = 0; j < 3; ++j) ok = ok && c[j].x[i] == want;
  }
  ok = __all_sync(0xffffffffu, ok);
  if (lane == 0) out[0] = ok ? 1 : 0;
}

}  // namespace revolta
