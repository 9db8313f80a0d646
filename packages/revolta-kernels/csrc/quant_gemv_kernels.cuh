// The skinny quantized GEMV's kernels (quant_gemv.cuh's body under each launch shape): the plain one, the one with
// int8 activations, the act-order (gathering) ones and the co-resident variant; quant_gemm.cu launches them.
#pragma once

#include "quant_gemv.cuh"

namespace revolta {

// Register bounds of the warp-local staging (without them the compiler takes more and loses blocks per SM):
// M <= 2 with 8-row steps at most 128 (two 8-warp blocks per SM; it took 166-181), M = 1 with 4-row steps (group
// size 32) at most 85 (three, as before the staging change; it took 98-128). M = 2 with 4-row steps spills at 85
// and keeps two blocks unbounded; larger M keeps the compiler's choice (one block per SM either way).
__host__ __device__ constexpr int gemv_min_blocks(int mt, int warps, int u) {
  return mt == 1 && u == 4 ? 24 / warps : mt <= 2 && u == 8 ? 16 / warps : 0;
}
template <int BITS, int MT, int WARPS, int U, bool DEFER>
__global__ void __launch_bounds__(WARPS * 32, gemv_min_blocks(MT, WARPS, U)) quant_gemv_kernel(QuantGemmParams p) {
  quant_gemv_body<BITS, MT, WARPS, U, DEFER>(p);
}

// int8 activations with dp4a dot products (quant_gemv_dp4a.cuh; tune flag kGemvFlagInt8X): 8 warps, deferred scale,
// the bounds of the fp16 kernel of the same shape.
template <int BITS, int MT, int U>
__global__ void __launch_bounds__(8 * 32, gemv_min_blocks(MT, 8, U)) quant_gemv_dp4a_kernel(QuantGemmParams p) {
  quant_gemv_body<BITS, MT, 8, U, true, false, true>(p);
}

// Act-order calls (p.x_order): the default shape (8 warps, deferred scale) with the gathering staging, a kernel of its
// own so that the plain kernels' code stays as it was (one with both paths measured 0.6% slower AWQ decode).
template <int BITS, int MT, int U>
__global__ void __launch_bounds__(8 * 32, gemv_min_blocks(MT, 8, U)) quant_gemv_gather_kernel(QuantGemmParams p) {
  quant_gemv_body<BITS, MT, 8, U, true, true>(p);
}

// The same with int8 activations (quant_gemv_dp4a.cuh): the rows are quantized after the gather has staged them.
template <int BITS, int MT, int U>
__global__ void __launch_bounds__(8 * 32, gemv_min_blocks(MT, 8, U)) quant_gemv_gather_dp4a_kernel(QuantGemmParams p) {
  quant_gemv_body<BITS, MT, 8, U, true, true, true>(p);
}

// The "co-resident" variant: registers capped so that 4 blocks fit one SM (<= 64 at 8 warps). With the split-K
// plan filling only part of the slots, the next PDL-launched kernel's blocks become resident beside this one's
// and issue their weight loads during its tail; quant_gemm.cu instantiates it for 8 warps x 4 rows, M <= 2.
// (A minimum-blocks bound of 1 is not the same as none: it measured 228 instead of 128 registers for
// quant_gemv_kernel<4, 1, 8, 8, true>, hence a separate kernel.)
template <int BITS, int MT, int WARPS, int U>
__global__ void __launch_bounds__(WARPS * 32, 4) quant_gemv_co_kernel(QuantGemmParams p) {
  quant_gemv_body<BITS, MT, WARPS, U, true>(p);
}

}  // namespace revolta
