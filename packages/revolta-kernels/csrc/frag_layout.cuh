// The tensor-core fragment layout that the "frag" attention kernels (decode_frag.cuh, prefill_frag.cuh)
// rely on, and the probe kernel that checks it on the running GPU.
//
// WMMA leaves the mapping of fragment elements to matrix (row, column) unspecified. The frag kernels use
// one concrete mapping for 16x16x16 f16 WMMA (the register layout of mma.m16n8k16, which nvcc uses for
// WMMA on sm_80 and later). With g = lane / 4 and t = lane % 4, element i of
//   accumulator (float) and matrix_a (row-major):  row g + 8 * ((i >> 1) & 1),  col 2t + (i & 1) + 8 * (i >> 2)
//   matrix_b (row- or column-major), (k, n):       k 2t + (i & 1) + 8 * ((i >> 1) & 1),  n g + 8 * (i >> 2)
// Under it an S = Q K^T accumulator turns element by element into the matrix_a fragment of P for P V
// (no shared-memory round trip), rows are reduced with two quad shuffles, and cache bytes can be
// dequantised straight into matrix_b fragments. The code is plain WMMA, so it compiles (and is
// checked) for sm_70 too; but Volta's HMMA.884 fragments are laid out differently, so the host runs
// wmma_layout_probe_kernel once per device (revolta_frag_layout_probe) and launches the frag kernels
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

// The four 32-bit words (half2) of an f16 fragment under the layout above: word w holds elements 2w, 2w+1.
template <typename Frag>
__device__ __forceinline__ uint32_t* frag_words(Frag& f) {
  return reinterpret_cast<uint32_t*>(&f.x[0]);
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

// One warp. out[0] = 1 when every fragment type matches the layout above; out[1 + 256 * f + 8 * lane + i]
// = what element i of lane holds for fragment f (0 accumulator, 1 matrix_a, 2 matrix_b col-major,
// 3 matrix_b row-major), encoded as row * 16 + col (or k * 16 + n), for diagnostics. (A template only so
// that every translation unit including this header may define it.)
template <int UNUSED = 0>
__global__ void __launch_bounds__(32) wmma_layout_probe_kernel(int* out) {
  using namespace nvcuda;
  __shared__ float s_acc[256];
  __shared__ __half s_a[256], s_bc[256], s_br[256];
  const int lane = threadIdx.x;
  for (int e = lane; e < 256; e += 32) {
    const int r = e / 16, c = e % 16;
    s_acc[e] = static_cast<float>(e);                    // (row r, col c) row-major
    s_a[e] = __int2half_rn(e);                           // (row r, k c) row-major
    s_bc[e] = __int2half_rn(c * 16 + r);                 // col-major: (k = c, n = r) at n * 16 + k
    s_br[e] = __int2half_rn(e);                          // row-major: (k = r, n = c) at k * 16 + n
  }
  __syncwarp();
  FragAcc acc;
  FragA a;
  FragBCol bc;
  FragBRow br;
  wmma::load_matrix_sync(acc, s_acc, 16, wmma::mem_row_major);
  wmma::load_matrix_sync(a, s_a, 16);
  wmma::load_matrix_sync(bc, s_bc, 16);
  wmma::load_matrix_sync(br, s_br, 16);
  bool ok = FragAcc::num_elements == 8 && FragA::num_elements == 8 && FragBCol::num_elements == 8 &&
            FragBRow::num_elements == 8;
  for (int i = 0; i < 8; ++i) {
    const int want_ac = frag_ac_row(lane, i) * 16 + frag_ac_col(lane, i);
    const int want_b = frag_b_k(lane, i) * 16 + frag_b_n(lane, i);
    const int got[4] = {static_cast<int>(i < FragAcc::num_elements ? acc.x[i] : -1.f),
                        i < FragA::num_elements ? __half2int_rn(a.x[i]) : -1,
                        i < FragBCol::num_elements ? __half2int_rn(bc.x[i]) : -1,
                        i < FragBRow::num_elements ? __half2int_rn(br.x[i]) : -1};
    ok = ok && got[0] == want_ac && got[1] == want_ac && got[2] == want_b && got[3] == want_b;
    for (int f = 0; f < 4; ++f) out[1 + 256 * f + 8 * lane + i] = got[f];
  }
  ok = __all_sync(0xffffffffu, ok);
  if (lane == 0) out[0] = ok ? 1 : 0;
}

}  // namespace revolta
