// Host side of the skinny quantized GEMM (quant_gemm.cu includes it once): the launch-parameter overrides,
// the kernel instantiation for a runtime (bits, rows, warps, rows per step, deferred scale), its occupancy, and
// the split-K launch plan and workspace size.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "quant_gemv_whole_k.cuh"

using namespace revolta;

namespace {

constexpr int kSkinnyMaxM = 8;
// Flags OR-ed into revolta_quant_gemm_act's act (quant_gemm.cu): run the act-order kernel's code without an order;
// int8 activations with dp4a dot products in the skinny kernels (quant_gemv_dp4a.cuh).
constexpr int kActOrderCode = 0x100;
constexpr int kActInt8X = 0x200;
constexpr int kMaxDevices = 16;

// Launch-parameter overrides for benchmark sweeps (revolta_quant_tune); 0 / -1 = the built-in choice.
struct Tuning {
  int gemv_warps = 0, gemv_rows = 0, gemv_waves = 1, gemm_variant = -1, gemv_defer = -1, gemv_prefetch_kb = -1,
      gemv_share = 0, gemv_minb = 0, gemv_full = -1, gemv_flags = -1;
};
// Built-in choice = the best of the H200 sweep (8 warps, 8 rows per step, one-wave floor split, deferred
// scale); 4 rows per step where K or the group needs it.
constexpr int kGemvDefaultWarps = 8, kGemvDefaultDefer = 1;
// Bytes of weights the whole grid prefetches to L2 before its PDL wait (split evenly over the blocks):
// enough to cover the launch and first-load latency, far below the 40-60 MB L2 of the GPUs that have PDL.
// H200: 0 / 4 MB / 16 MB / 64 MB on chained M=1 calls gave 67 / 66 / 59 / 57% of copy
// (4096x14336 + back) and 83 / 83 / 79 / 65% (5120x27648 + back): off by default.
constexpr int kGemvDefaultPrefetchKB = 0;
// Share of the resident block slots the split-K plan fills: 1 = all (one full wave), 2 = half, so that the
// next PDL-launched kernel's blocks fit beside this one's and stream their weights during its tail.
constexpr int kGemvDefaultShare = 1;
// QuantGemmParams::flags of the skinny kernels (kGemvFlagEarlyTrigger | kGemvFlagOnePass | kGemvFlagFull16 |
// kGemvFlagFull16Plain, quant_gemv_common.cuh; the Full16 bits are read by the plan only). Default: one-pass staging
// and 16-column split-K-free blocks for every act (H200, PDL chains of M=1 calls: one-pass -5.9% on Llama-8B's 32
// layers, -5.3% on 4096x6144-with-norm + back, -4.2% on 4096x4096 + back; engine decode o_proj 5.7 -> 4.9 us on
// the path with both bits; with the warp-local norm staging the 16 columns pay for the fused-norm qkv too: AWQ
// batch 1 505.1-505.5 -> 506.8-507.5 tok/s).
constexpr int kGemvDefaultFlags = kGemvFlagOnePass | kGemvFlagFull16;
Tuning g_tune;
// kGemvFlagInt8X is not a schedule flag: every call says whether it rounds its activations to int8 (plan_gemv).
int gemv_flags() { return (g_tune.gemv_flags >= 0 ? g_tune.gemv_flags : kGemvDefaultFlags) & ~kGemvFlagInt8X; }

int current_device() {
  int dev = 0;
  cudaGetDevice(&dev);
  return dev < 0 || dev >= kMaxDevices ? 0 : dev;
}

// ---- skinny GEMM plan ----
struct GemvPlan {
  int mt, warps, rows_step, defer, splits, rows_per_split, smem, blocks_per_sm, tiles, prefetch_rows, minb, full;
  int xq;  // int8 activations (quant_gemv_dp4a.cuh)
};

// The split-K-free variant (quant_gemv_whole_k.cuh) exists for int4 g128, K % 1024 == 0, K <= 4096, N % 32 == 0,
// M <= 2, without the fused SiLU (act 1). Built-in rule: N <= kGemvFullMaxN (the q/k/v and o projections of
// hidden size 4096; 0 = never); tune gemv_full = 1 forces it wherever it exists, 0 never.
constexpr int kGemvFullMaxN = 8192;
bool gemv_full_legal(int M, int N, int K, int bits, int group_size, int act) {
  return bits == 4 && group_size == 128 && K % 1024 == 0 && K <= 4096 && N % quant_gemv_whole_k_cols == 0 && M <= 2 &&
         act != 1;
}
bool gemv_full_default(int N, int K) {
  (void)K;
  return N <= kGemvFullMaxN;
}

// The co-resident variant (quant_gemv_kernel's MINB = 4: <= 64 registers) exists for 8 warps x 4 rows per
// step at M <= 2 with the deferred scale.
constexpr int kGemvCoMinb = 4;
bool gemv_has_minb(int mt, int w, int u, bool defer) { return mt <= 2 && w == 8 && u == 4 && defer; }

template <int BITS, int MT, int W, int U>
const void* gemv_fn(bool defer, int minb = 1) {
  if constexpr (MT <= 2 && W == 8 && U == 4) {
    if (minb == kGemvCoMinb && defer) return reinterpret_cast<const void*>(&quant_gemv_co_kernel<BITS, MT, W, U>);
  }
  return defer ? reinterpret_cast<const void*>(&quant_gemv_kernel<BITS, MT, W, U, true>)
               : reinterpret_cast<const void*>(&quant_gemv_kernel<BITS, MT, W, U, false>);
}

// Kernel address for runtime (bits, mt, warps, rows_step, defer); every combination is instantiated.
template <int BITS, int MT>
const void* gemv_fn_wu(int w, int u, bool defer, int minb) {
  if (w == 8) return u == 8 ? gemv_fn<BITS, MT, 8, 8>(defer) : gemv_fn<BITS, MT, 8, 4>(defer, minb);
  return u == 8 ? gemv_fn<BITS, MT, 4, 8>(defer) : gemv_fn<BITS, MT, 4, 4>(defer);
}
template <int BITS>
const void* gemv_fn_mt(int mt, int w, int u, bool defer, int minb) {
  switch (mt) {
    case 1: return gemv_fn_wu<BITS, 1>(w, u, defer, minb);
    case 2: return gemv_fn_wu<BITS, 2>(w, u, defer, minb);
    case 4: return gemv_fn_wu<BITS, 4>(w, u, defer, minb);
    default: return gemv_fn_wu<BITS, 8>(w, u, defer, minb);
  }
}
const void* gemv_kernel(int bits, int mt, int w, int u, bool defer, int minb) {
  return bits == 4 ? gemv_fn_mt<4>(mt, w, u, defer, minb) : gemv_fn_mt<8>(mt, w, u, defer, minb);
}

// Blocks per SM: the register/thread limit (asked once per kernel and device), then shared memory.
int gemv_blocks_per_sm(int bits, int mt, int w, int u, bool defer, int smem, int minb) {
  static int reg_limit[kMaxDevices][2][4][2][2][2][2];
  static int smem_per_sm[kMaxDevices], smem_reserved[kMaxDevices];
  const int dev = current_device();
  const int mi = mt == 1 ? 0 : mt == 2 ? 1 : mt == 4 ? 2 : 3;
  int& regs = reg_limit[dev][bits == 4 ? 0 : 1][mi][w == 8 ? 1 : 0][u == 8 ? 1 : 0][defer ? 1 : 0][minb > 1 ? 1 : 0];
  if (regs == 0) {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, gemv_kernel(bits, mt, w, u, defer, minb), w * 32, 0) !=
        cudaSuccess) {
      cudaGetLastError();
      b = 1;
    }
    regs = b > 0 ? b : 1;
  }
  if (smem_per_sm[dev] == 0) {
    int v = 0, r = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess) v = 0;
    if (cudaDeviceGetAttribute(&r, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess) r = 1024;
    cudaGetLastError();  // a failed attribute query must not surface as the next launch's error
    smem_per_sm[dev] = v > 0 ? v : 96 * 1024;
    smem_reserved[dev] = r;
  }
  const int by_smem = smem_per_sm[dev] / (smem + 128 + smem_reserved[dev]);
  const int b = regs < by_smem ? regs : by_smem;
  return b > 0 ? b : 1;
}

// Rows per split for `splits` splits: whole U-row steps, activations within the shared-memory cap.
int split_rows(int rows, int splits, int u, int cap) {
  const int rps = ((rows + splits - 1) / splits + u - 1) / u * u;
  return rps > cap ? cap : rps;
}

// Splits K so the grid keeps every resident block slot busy. gemv_waves >= 1 ("floor"): fill waves x the
// slots without starting a partial extra wave (fewest splits). gemv_waves == 0 ("balanced"): the fewest
// splits whose blocks fill whole waves to >= 95% (a grid of 216 tiles on 264 slots leaves 18% idle; 6 splits
// make 1296 blocks, 98% of 5 waves), keeping at least one step per warp in a split.
// gather (act-order calls): the split-K kernel's shape is the default one (quant_gemv_gather_kernel), whatever the
// warps / deferred-scale / co-resident overrides say. int8_x: the call rounds its activations to int8 where a
// kernel of the plan has that form (quant_gemv_dp4a.cuh); it changes the kernel, not the splits or the workspace.
GemvPlan plan_gemv(int M, int N, int K, int bits, int group_size, int num_sms, int act = 0, bool allow_full = true,
                   bool gather = false, bool int8_x = false) {
  GemvPlan pl{};
  pl.mt = M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : 8;
  if (allow_full && gemv_full_legal(M, N, K, bits, group_size, act) &&
      (g_tune.gemv_full == 1 || (g_tune.gemv_full < 0 && gemv_full_default(N, K)))) {
    pl.full = 1;
    pl.warps = kGemvFullWarps;
    pl.rows_step = kGemvFullLoads;
    pl.defer = 1;
    pl.splits = 1;
    pl.rows_per_split = K / 8;
    // kGemvFlagFull16 (any act) / kGemvFlagFull16Plain (act 0): 16-column blocks, 3 per SM (reported as minb = 3)
    const int fl = gemv_flags();
    const bool narrow = (fl & kGemvFlagFull16) != 0 || ((fl & kGemvFlagFull16Plain) != 0 && act != 2);
    pl.tiles = N / (narrow ? 16 : quant_gemv_whole_k_cols);
    pl.smem = gemv_full_smem_bytes(pl.mt, K);
    pl.blocks_per_sm = narrow ? 3 : 2;
    pl.minb = narrow ? 3 : 2;
    pl.xq = int8_x && narrow && !gather;
    return pl;
  }
  const int pack = 32 / bits, rows = K / pack, group_rows = group_size / pack;
  pl.warps = !gather && (g_tune.gemv_warps == 8 || g_tune.gemv_warps == 4) ? g_tune.gemv_warps : kGemvDefaultWarps;
  pl.defer = !gather && (g_tune.gemv_defer == 0 || g_tune.gemv_defer == 1) ? g_tune.gemv_defer : kGemvDefaultDefer;
  pl.rows_step = g_tune.gemv_rows == 4 || g_tune.gemv_rows == 8 ? g_tune.gemv_rows : 8;
  if (rows % 8 || group_rows % 8) pl.rows_step = 4;
  const int u = pl.rows_step;
  pl.minb = !gather && g_tune.gemv_minb == kGemvCoMinb && gemv_has_minb(pl.mt, pl.warps, u, pl.defer != 0) ? kGemvCoMinb
                                                                                                            : 1;
  pl.tiles = (N + kGemvTile - 1) / kGemvTile;
  const int x_row = pl.mt * pack * 2;
  int cap = kGemvXSmemCap / x_row / u * u;
  if (cap < u) cap = u;
  int rps = (rows + u - 1) / u * u;
  if (rps > cap) rps = cap;
  for (int pass = 0; pass < 2; ++pass) {
    pl.smem = gemv_smem_bytes(bits, pl.mt, pl.warps, rps);
    pl.blocks_per_sm = gemv_blocks_per_sm(bits, pl.mt, pl.warps, u, pl.defer != 0, pl.smem, pl.minb);
    if (g_tune.gemv_waves >= 1) {
      const int share = g_tune.gemv_share >= 1 ? g_tune.gemv_share : kGemvDefaultShare;
      const int slots = std::max(1, pl.blocks_per_sm * num_sms * g_tune.gemv_waves / share);
      rps = split_rows(rows, pl.tiles >= slots ? 1 : slots / pl.tiles, u, cap);
    } else {
      const long long slots = static_cast<long long>(pl.blocks_per_sm) * num_sms;
      const int min_rows = u * pl.warps;
      double best_eff = -1.0;
      for (int want = 1; want <= rows / u; ++want) {
        const int r = split_rows(rows, want, u, cap);
        if (want > 1 && r < min_rows) break;
        const long long blocks = static_cast<long long>(pl.tiles) * ((rows + r - 1) / r);
        const double eff = static_cast<double>(blocks) / (((blocks + slots - 1) / slots) * slots);
        if (eff > best_eff + 1e-9) {
          best_eff = eff;
          rps = r;
        }
        if (eff >= 0.95) break;
      }
    }
  }
  pl.rows_per_split = rps;
  pl.splits = (rows + rps - 1) / rps;
  pl.xq = int8_x && pl.warps == 8 && pl.defer != 0 && pl.minb == 1;
  pl.smem = gemv_smem_bytes(bits, pl.mt, pl.warps, rps);
  const long long pf_bytes = static_cast<long long>(g_tune.gemv_prefetch_kb >= 0 ? g_tune.gemv_prefetch_kb
                                                                                 : kGemvDefaultPrefetchKB) * 1024;
  const long long per_block = pf_bytes / (static_cast<long long>(pl.tiles) * pl.splits) / (kGemvTile * 4);
  pl.prefetch_rows = static_cast<int>(per_block < rps ? per_block : rps);
  return pl;
}

// A fixed counter region first (so calls of different shapes never overlap one's counters with another's
// partial sums), then splits x M x N fp32 partials.
long long gemv_workspace_bytes(const GemvPlan& pl, int M, int N) {
  if (pl.splits <= 1 || pl.full) return 0;
  return kGemvCounterBytes + static_cast<long long>(pl.splits) * M * N * 4;
}

}  // namespace
