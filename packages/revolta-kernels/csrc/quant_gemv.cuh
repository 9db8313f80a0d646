// Skinny quantized GEMM for decode (M <= 8 rows): memory-bound, dequantized in registers.
//
// Grid (N / 128 column tiles, K splits). Each lane owns 4 columns, so one packed row of a tile is one
// 16-byte load per lane and 512 contiguous bytes per warp. A block's warps take the split's packed rows in
// steps of U rows (warp w: steps w, w + WARPS, ...), each step inside one quantization group so its scales
// and zero points are one 8-byte and one 4-byte load issued with the step's U weight loads. Registers
// double-buffer the steps: the next step's loads are in flight while this one is dequantized, so a warp
// keeps 1-2 x U x 512 bytes outstanding; at M = 1 with 8-row steps each row's registers are reloaded with
// the step two ahead as soon as the row is read, so it keeps ~2 x U x 512 bytes outstanding (H200: +1.6% on
// the Llama-8B AWQ decode step). The split's activations are staged once in shared memory,
// already permuted into the pairs the dequantizer produces; dot products run as HFMA2 over two packed rows
// and are flushed to fp32. Two ways to apply the scale: per weight (HMUL2 of (q - z) by s, as a dense fp16
// weight) or, with DEFER, once per flush in fp32: the HFMA2s then sum (q - z) * x / 128 - exact integers
// times x scaled by a power of two, so 8 products (<= 15 * 65504 / 128 each) cannot overflow fp16 - and
// the flush adds 128 * s * (sum) in fp32. DEFER saves 4 of ~19 instructions per packed word.
//
// Split-K without a second kernel: each split writes fp32 partial sums to its own slice of the workspace,
// and the last block of a column tile to arrive (an atomic counter per tile) sums the slices in split
// order - deterministic - writes fp16 and re-arms the counter for the next launch. No host sync, no
// allocation: CUDA-graph capturable with a workspace the caller owns (counters zeroed once).
//
// Programmatic dependent launch (pdl.cuh; sm_90+, no-ops before): weights, scales and zeros are read-only
// (no kernel writes them), so before pdl_wait() each warp issues its first two steps' loads into registers
// (and, if asked, the block prefetches `prefetch_rows` more packed rows to L2); everything that touches x,
// the output, the partials or the counters comes after the wait, which returns only once the previous
// kernel on the stream has completed and flushed. Two skinny launches in flight therefore never share the
// workspace: the later one touches it only after the earlier one has finished.
//
// act = 1 (fused SiLU-and-mul for the MLP's down projection): x rows are [gate (K), up (K)] of the gate_up
// output and the staging multiplies silu(gate) * up in fp32, rounded to fp16 as revolta::silu_and_mul.
//
// act = 2 (fused residual add + RMSNorm of a pre-norm block, K = the hidden size): rms_norm(h) . W =
// (1 / rms) (h * w) . W, so each warp stages h * w for h = x + residual (rounded to fp16 as
// revolta::fused_add_rms_norm) with no barrier for the row's sum of squares, and the 1 / rms multiplies the
// finished sums (gemv_stage_warp). The sum of h^2 comes from the warps' staged rows when one split is the whole
// K, else from a whole-K pass of every block after its dot products. The tile-0 blocks write h to h_out, a new
// tensor: the other blocks still read x and the old residual, so nothing is updated in place.
#pragma once

#include "pdl.cuh"
#include "quant_common.cuh"
#include "quant_gemv_common.cuh"
#include "quant_gemv_dp4a.cuh"
#include "split_arrive.cuh"

namespace revolta {

// The kernel body; the kernels of quant_gemv_kernels.cuh differ only in launch bounds and these switches. XQ:
// int8 activations and dp4a dot products (quant_gemv_dp4a.cuh; int4 or int8 weights, the deferred scale only).
template <int BITS, int MT, int WARPS, int U, bool DEFER, bool GATHER = false, bool XQ = false>
__device__ __forceinline__ void quant_gemv_body(const QuantGemmParams& p) {
  constexpr int PACK = 32 / BITS, PAIRS = PACK / 2;
  static_assert(!XQ || DEFER, "int8 activations: the deferred scale");
  // One row (M = 1), 8-row steps: refill each register set with the step two ahead as it is read (below). Other
  // shapes keep the plain double buffer: there the refill's extra live registers cost blocks per SM (M = 2:
  // 163 instead of 128 registers on sm_90; 4-row steps: 96 instead of 80 on sm_70) or spills (the minb-4 kernel).
  constexpr bool kRefill = MT == 1 && U == 8;
  static_assert(U % kGemvFlush == 0, "steps must hold whole flush groups");
  using XRow = typename XRowOf<PAIRS>::type;  // one packed row of x
  extern __shared__ __align__(16) unsigned char gemv_smem[];
  __shared__ int is_last;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int tile = blockIdx.x, split = blockIdx.y;
  const int n0 = tile * kGemvTile + lane * 4;
  const bool col_ok = n0 < p.N;
  const int r0 = split * p.rows_per_split;
  const int nrows = min(p.K / PACK - r0, p.rows_per_split);  // a multiple of U
  const int steps = nrows / U;
  const int group_rows = p.group_size / PACK;
  // The group of a packed row: a shift for the usual power-of-two group sizes (a runtime division costs ~25
  // instructions per step).
  const int group_shift = (group_rows & (group_rows - 1)) == 0 ? __ffs(group_rows) - 1 : -1;
  auto group_of = [&](int row) { return group_shift >= 0 ? row >> group_shift : row / group_rows; };
  // The group's scales and packed zeros of this lane's 4 columns, for packed row `row`.
  auto load_group = [&](int row, uint2& sv, uint32_t& zw) {
    const int g = group_of(row);
    sv = load_once(reinterpret_cast<const uint2*>(p.scales + static_cast<size_t>(g) * p.N + n0));
    zw = load_once(p.qzeros + static_cast<size_t>(g) * (p.N / PACK) + n0 / PACK);
  };
  // This warp's steps (w, w + WARPS, ...) and the split-local row of its li-th packed row.
  const int wsteps = warp < steps ? (steps - 1 - warp) / WARPS + 1 : 0;
  auto row_of = [&](int li) { return (warp + (li / U) * WARPS) * U + li % U; };

  // Act-order: the channel indices of the rows this warp will stage (below) into shared memory (read-only, so
  // before the wait; before the weight loads, whose registers it would otherwise add to). The gathering kernel
  // also runs calls without an order (kActOrderCode), which stage plainly.
  if (GATHER && p.x_order != nullptr) {
    gemv_order_prefetch<PAIRS>(p, reinterpret_cast<XRow*>(gemv_smem), r0, wsteps * U, row_of);
  }

  uint4 wnext[U];
  uint2 snext = make_uint2(0, 0);
  uint32_t znext = 0;
  auto fetch = [&](int s) {
    const int r = r0 + s * U;
    if (col_ok) {
      const uint32_t* src = p.qweight + static_cast<size_t>(r) * p.N + n0;
#pragma unroll
      for (int u = 0; u < U; ++u) wnext[u] = load_once(reinterpret_cast<const uint4*>(src + static_cast<size_t>(u) * p.N));
      load_group(r, snext, znext);
    } else {
#pragma unroll
      for (int u = 0; u < U; ++u) wnext[u] = make_uint4(0, 0, 0, 0);
    }
  };
  // Before the PDL wait (read-only data only): the first two steps' weights into registers (the double
  // buffer: step `warp` in w0, step `warp + WARPS` in wnext), then an optional L2 prefetch of the block's
  // next packed rows (4 lines of 128 bytes per row of the tile; off by default: it measured slower).
  uint4 w0[U];
  uint2 s0 = make_uint2(0, 0);
  uint32_t z0 = 0;
  if (warp < steps) {
    fetch(warp);
#pragma unroll
    for (int u = 0; u < U; ++u) w0[u] = wnext[u];
    s0 = snext;
    z0 = znext;
    if (warp + WARPS < steps) fetch(warp + WARPS);
  }
  {
    const int first = min(steps, 2 * WARPS) * U;  // rows the first fetches already requested
    const int pf_rows = min(p.prefetch_rows, nrows - first);
    const int tile_n0 = tile * kGemvTile;
    for (int idx = tid; idx < pf_rows * 4; idx += WARPS * 32) {
      const int r = first + (idx >> 2), col = tile_n0 + (idx & 3) * 32;
      if (col < p.N) prefetch_l2(p.qweight + static_cast<size_t>(r0 + r) * p.N + col);
    }
  }
  pdl_wait();  // x comes from the previous kernel; out / partials / counters may still be in its use
  pdl_trigger();
  // (The schedule flags stay out of this kernel: with their branches in it, its share of the AWQ decode step
  // grew from 979 to 1068 us on the H200.)
  // Each warp stages the rows of its own steps (warp w: steps w, w + WARPS, ...) and starts once they are in.
  const bool norm = p.act == 2;
  XRow* xs = reinterpret_cast<XRow*>(gemv_smem);
  WarpNorm<MT> wn;
  {
    gemv_stage_warp<PAIRS, MT, kRefill ? 2 : 1, DEFER, GATHER ? kGatherGlobal : kGatherNone>(
        p, xs, nrows, r0, wsteps * U, row_of, tile == 0, wn);
  }
  if constexpr (XQ) {
    __syncwarp();
#pragma unroll
    for (int m = 0; m < MT; ++m) gemv_quantize_rows<U>(xs + m * nrows, wsteps * U, lane, row_of);
  }
  __syncwarp();

  float acc[MT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[m][c] = 0.f;

  // XQ: one step with int8 activations (quant_gemv_dp4a.cuh; the rows were quantized in place after staging): it
  // sums 8 nibbles x 8 activations per int4 word in two dp4a (the high nibbles as 16 q, shifted out at the end), 4
  // bytes x 4 activations per int8 word in one, and applies zero point and both scales once per step in fp32.
  // Refills as the fp16 step does.
  auto xq_step = [&](uint4 (&w)[U], uint2& sv, uint32_t& zw, const int s, const int next) {
    if constexpr (XQ) {
      int zi[4];
      float sf[4];
      xq_columns<BITS>(zw, sv, n0, p.zero_offset, zi, sf);
      const bool refill = kRefill && col_ok && next < steps;
      const uint4* nsrc = reinterpret_cast<const uint4*>(p.qweight + static_cast<size_t>(r0 + next * U) * p.N + n0);
      const size_t row_stride = static_cast<size_t>(p.N) / 4;  // uint4 per packed row
      if (refill) load_group(r0 + next * U, sv, zw);
      int lo_acc[MT][4] = {}, hi_acc[MT][4] = {};
#pragma unroll
      for (int u = 0; u < U; ++u) {
        uint2 xq[MT];  // int4: (fields 0, 2, 4, 6), (1, 3, 5, 7); int8: (fields 0-3), unused
#pragma unroll
        for (int m = 0; m < MT; ++m) xq[m] = *reinterpret_cast<const uint2*>(&xs[m * nrows + s * U + u]);
        const uint32_t words[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
        if (refill) w[u] = load_once(nsrc);
        nsrc += row_stride;
        xq_dot_row<BITS, MT>(words, xq, lo_acc, hi_acc);
      }
#pragma unroll
      for (int m = 0; m < MT; ++m)
        xq_accumulate<BITS>(lo_acc[m], hi_acc[m], zi, sf, gemv_xq_meta(&xs[m * nrows + s * U]), acc[m]);
    }
  };
  // One step: U packed rows of this lane's 4 columns (weights w, the group's scales sv and zeros zw). Each
  // row's registers are refilled with the same row of step `next` (if it exists) as soon as the row is read,
  // and sv / zw with that step's once the column constants are made, so the loads of the step after next are
  // in flight while this one is dequantized.
  auto step = [&](uint4 (&w)[U], uint2& sv, uint32_t& zw, const int s, const int next) {  // next: kRefill only
    const __half* sh = reinterpret_cast<const __half*>(&sv);
    ColQuant cq[4];
    float sf[4];  // DEFER: the scale applied at the flush
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      cq[c] = col_quant(zero_field<BITS>(zw, n0 + c, p.zero_offset), sh[c]);
      sf[c] = __half2float(sh[c]) * kGemvDeferScale;
    }
    const bool refill = kRefill && col_ok && next < steps;
    const uint32_t* nsrc = p.qweight + static_cast<size_t>(r0 + next * U) * p.N + n0;
    if (refill) load_group(r0 + next * U, sv, zw);

    __half2 hacc[MT][4];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      XRow xr[MT];
#pragma unroll
      for (int m = 0; m < MT; ++m) xr[m] = xs[m * nrows + s * U + u];
      const uint32_t words[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
      if (refill) w[u] = load_once(reinterpret_cast<const uint4*>(nsrc + static_cast<size_t>(u) * p.N));
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        __half2 d[PAIRS];
        dequant_word<BITS, !DEFER>(words[c], cq[c], d);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const uint32_t* xp = reinterpret_cast<const uint32_t*>(&xr[m]);
          __half2 h = u % kGemvFlush == 0 ? __hmul2(d[0], u2h(xp[0])) : __hfma2(d[0], u2h(xp[0]), hacc[m][c]);
#pragma unroll
          for (int i = 1; i < PAIRS; ++i) h = __hfma2(d[i], u2h(xp[i]), h);
          hacc[m][c] = h;
        }
      }
      if (u % kGemvFlush == kGemvFlush - 1) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const float2 f = __half22float2(hacc[m][c]);
            if constexpr (DEFER) {
              acc[m][c] = fmaf(sf[c], f.x + f.y, acc[m][c]);
            } else {
              acc[m][c] += f.x + f.y;
            }
          }
      }
    }
  };
  auto run_step = [&](uint4 (&w)[U], uint2& sv, uint32_t& zw, const int s, const int next) {
    if constexpr (XQ) {
      xq_step(w, sv, zw, s, next);
    } else {
      step(w, sv, zw, s, next);
    }
  };
  if constexpr (kRefill) {
    // The warp's steps alternate between the two register sets, both loaded before the PDL wait; each step
    // refills its set with the step two ahead, so up to two steps' loads are outstanding.
    for (int s = warp; s < steps; s += 2 * WARPS) {
      run_step(w0, s0, z0, s, s + 2 * WARPS);
      if (s + WARPS < steps) run_step(wnext, snext, znext, s + WARPS, s + 3 * WARPS);
    }
  } else if (warp < steps) {
    run_step(w0, s0, z0, warp, 0);  // its loads were issued before the PDL wait, as were those of the next step
    for (int s = warp + WARPS; s < steps; s += WARPS) {
      uint4 w[U];
#pragma unroll
      for (int u = 0; u < U; ++u) w[u] = wnext[u];
      uint2 sv = snext;
      uint32_t zw = znext;
      if (s + WARPS < steps) fetch(s + WARPS);
      run_step(w, sv, zw, s, 0);
    }
  }

  // act 2: the rows' sums of h^2 (the warps' own when the split is the whole K, else a whole-K pass of every
  // block - the same order in each, so the splits agree) and the warps' staging scale 2^e taken back out.
  __shared__ float warp_ss[WARPS][MT];
  if (norm) {
    float ss[MT];
    if (nrows * PACK == p.K) {
#pragma unroll
      for (int m = 0; m < MT; ++m) ss[m] = wn.ss[m];
    } else {
      gemv_thread_sumsq<MT, WARPS * 32>(p, false, ss);
#pragma unroll
      for (int m = 0; m < MT; ++m) ss[m] = warp_sum(ss[m]);
    }
    gemv_warp_norm_out(ss, wn, acc, warp_ss);
  }

  // Cross-warp sum through shared memory (the staged activations are dead), then one value per output.
  __syncthreads();
  float* red = reinterpret_cast<float*>(gemv_smem);  // [WARPS][MT][128]
#pragma unroll
  for (int m = 0; m < MT; ++m)
    *reinterpret_cast<float4*>(red + (warp * MT + m) * kGemvTile + lane * 4) =
        make_float4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]);
  __syncthreads();
  const bool single = gridDim.y == 1;
  for (int idx = tid; idx < MT * kGemvTile; idx += WARPS * 32) {
    const int m = idx / kGemvTile, col = idx % kGemvTile, n = tile * kGemvTile + col;
    if (m >= p.M || n >= p.N) continue;
    float v = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) v += red[(w * MT + m) * kGemvTile + col];
    if (norm) v *= gemv_row_inv<WARPS>(p, warp_ss, m);
    if (single) {
      p.out[static_cast<size_t>(m) * p.N + n] = __float2half_rn(v);
    } else {
      p.partial[(static_cast<size_t>(split) * p.M + m) * p.N + n] = v;
    }
  }
  if (single) {
    return;
  }

  // Last block of this column tile: sum the splits' partials (fixed order) into fp16, re-arm the counter.
  // The barrier orders the block's partial stores before thread 0's acquire-release arrival (split_arrive), which
  // the last arrival's block reads the other partials after.
  __syncthreads();
  if (tid == 0) is_last = split_arrive(p.counters + tile) == static_cast<int>(gridDim.y) - 1;
  __syncthreads();
  if (!is_last) {
    return;
  }
  const int splits = gridDim.y;
  const size_t stride = static_cast<size_t>(p.M) * p.N;
  for (int idx = tid; idx < p.M * kGemvTile; idx += WARPS * 32) {
    const int m = idx / kGemvTile, n = tile * kGemvTile + idx % kGemvTile;
    if (n >= p.N) continue;
    const float* src = p.partial + static_cast<size_t>(m) * p.N + n;
    float a[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j] = 0.f;
    for (int k = 0; k < splits; k += 8) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (k + j < splits) a[j] += __ldcg(src + static_cast<size_t>(k + j) * stride);
    }
    p.out[static_cast<size_t>(m) * p.N + n] = __float2half_rn(((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));
  }
  if (tid == 0) p.counters[tile] = 0;
}

}  // namespace revolta
