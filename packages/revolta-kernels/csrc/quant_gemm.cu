// C ABI of the quantized GEMM (quant_gemv.cuh for M <= 8, quant_gemm.cuh above): shape checks that need no
// device access, the launch plan (K splits from the kernel's occupancy), launch on the caller's stream.
#include <cuda_runtime.h>

#include <algorithm>

#include "quant_gemm.cuh"
#include "quant_gemv_full.cuh"

using namespace revolta;

namespace {

constexpr int kSkinnyMaxM = 8;
constexpr int kMaxDevices = 16;

// Launch-parameter overrides for benchmark sweeps (revolta_quant_tune); 0 / -1 = the built-in choice.
struct Tuning {
  int gemv_warps = 0, gemv_rows = 0, gemv_waves = 1, gemm_variant = -1, gemv_defer = -1, gemv_prefetch_kb = -1,
      gemv_share = 0, gemv_minb = 0, gemv_full = -1, gemv_flags = -1;
};
// Built-in choice = the best of the H200 sweep (8 warps, 8 rows per step, one-wave floor split, deferred
// scale: benchmarks/results/h200_gemv_quant_bench.json); 4 rows per step where K or the group needs it.
constexpr int kGemvDefaultWarps = 8, kGemvDefaultDefer = 1;
// Bytes of weights the whole grid prefetches to L2 before its PDL wait (split evenly over the blocks):
// enough to cover the launch and first-load latency, far below the 40-60 MB L2 of the GPUs that have PDL.
// H200 run 1 of this change: 0 / 4 MB / 16 MB / 64 MB on chained M=1 calls gave 67 / 66 / 59 / 57% of copy
// (4096x14336 + back) and 83 / 83 / 79 / 65% (5120x27648 + back): off by default.
constexpr int kGemvDefaultPrefetchKB = 0;
// Share of the resident block slots the split-K plan fills: 1 = all (one full wave), 2 = half, so that the
// next PDL-launched kernel's blocks fit beside this one's and stream their weights during its tail.
constexpr int kGemvDefaultShare = 1;
// QuantGemmParams::flags of the split-K-free kernel (kGemvFlagEarlyTrigger | kGemvFlagOnePass | kGemvFlagFull16 |
// kGemvFlagFull16Plain, quant_gemv.cuh; the Full16 bits are read by the plan only). Default: one-pass staging and
// 16-column split-K-free blocks for calls without the fused norm (H200, helper qgemv run 2, PDL chains of M=1
// calls: one-pass -5.9% on Llama-8B's 32 layers, -5.3% on 4096x6144-with-norm + back, -4.2% on 4096x4096 + back;
// 16 columns on top -3.7% on 4096x4096 + back but +6.8% on 4096x6144-with-norm + back; engine decode o_proj
// 5.7 -> 4.9 us on the path with both bits for every act; benchmarks/results/qgemv).
constexpr int kGemvDefaultFlags = kGemvFlagOnePass | kGemvFlagFull16Plain;
Tuning g_tune;
int gemv_flags() { return g_tune.gemv_flags >= 0 ? g_tune.gemv_flags : kGemvDefaultFlags; }

int current_device() {
  int dev = 0;
  cudaGetDevice(&dev);
  return dev < 0 || dev >= kMaxDevices ? 0 : dev;
}

// ---- skinny GEMM plan ----
struct GemvPlan {
  int mt, warps, rows_step, defer, splits, rows_per_split, smem, blocks_per_sm, tiles, prefetch_rows, minb, full;
};

// The split-K-free variant (quant_gemv_full.cuh) exists for int4 g128, K % 1024 == 0, K <= 4096, N % 32 == 0,
// M <= 2, without the fused SiLU (act 1). Built-in rule: N <= kGemvFullMaxN (the q/k/v and o projections of
// hidden size 4096; 0 = never); tune gemv_full = 1 forces it wherever it exists, 0 never.
constexpr int kGemvFullMaxN = 8192;
bool gemv_full_legal(int M, int N, int K, int bits, int group_size, int act) {
  return bits == 4 && group_size == 128 && K % 1024 == 0 && K <= 4096 && N % quant_gemv_full_cols == 0 && M <= 2 &&
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
GemvPlan plan_gemv(int M, int N, int K, int bits, int group_size, int num_sms, int act = 0, bool allow_full = true) {
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
    pl.tiles = N / (narrow ? 16 : quant_gemv_full_cols);
    pl.smem = gemv_full_smem_bytes(pl.mt, K);
    pl.blocks_per_sm = narrow ? 3 : 2;
    pl.minb = narrow ? 3 : 2;
    return pl;
  }
  const int pack = 32 / bits, rows = K / pack, group_rows = group_size / pack;
  pl.warps = g_tune.gemv_warps == 8 || g_tune.gemv_warps == 4 ? g_tune.gemv_warps : kGemvDefaultWarps;
  pl.defer = g_tune.gemv_defer == 0 || g_tune.gemv_defer == 1 ? g_tune.gemv_defer : kGemvDefaultDefer;
  pl.rows_step = g_tune.gemv_rows == 4 || g_tune.gemv_rows == 8 ? g_tune.gemv_rows : 8;
  if (rows % 8 || group_rows % 8) pl.rows_step = 4;
  const int u = pl.rows_step;
  pl.minb = g_tune.gemv_minb == kGemvCoMinb && gemv_has_minb(pl.mt, pl.warps, u, pl.defer != 0) ? kGemvCoMinb : 1;
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

// Launched with programmatic dependent launch where available (pdl.cuh; the kernel keeps its contract).
template <int BITS, int MT, int W, int U>
cudaError_t launch_gemv(const QuantGemmParams& p, const GemvPlan& pl, cudaStream_t stream) {
  const dim3 grid(pl.tiles, pl.splits);
  if constexpr (MT <= 2 && W == 8 && U == 4) {
    if (pl.minb == kGemvCoMinb && pl.defer)
      return launch(quant_gemv_co_kernel<BITS, MT, W, U>, grid, dim3(W * 32), pl.smem, stream, p);
  }
  if (pl.defer) return launch(quant_gemv_kernel<BITS, MT, W, U, true>, grid, dim3(W * 32), pl.smem, stream, p);
  return launch(quant_gemv_kernel<BITS, MT, W, U, false>, grid, dim3(W * 32), pl.smem, stream, p);
}
template <int BITS, int MT>
cudaError_t launch_gemv_wu(const QuantGemmParams& p, const GemvPlan& pl, cudaStream_t stream) {
  if (pl.warps == 8) {
    return pl.rows_step == 8 ? launch_gemv<BITS, MT, 8, 8>(p, pl, stream) : launch_gemv<BITS, MT, 8, 4>(p, pl, stream);
  }
  return pl.rows_step == 8 ? launch_gemv<BITS, MT, 4, 8>(p, pl, stream) : launch_gemv<BITS, MT, 4, 4>(p, pl, stream);
}
template <int BITS>
cudaError_t launch_gemv_mt(const QuantGemmParams& p, const GemvPlan& pl, cudaStream_t stream) {
  if (pl.full) {
    const dim3 grid(pl.tiles), block(kGemvFullWarps * 32);
    if (pl.minb == 3) {
      if (pl.mt == 1) return launch(quant_gemv_full_kernel<1, 16>, grid, block, pl.smem, stream, p);
      return launch(quant_gemv_full_kernel<2, 16>, grid, block, pl.smem, stream, p);
    }
    if (pl.mt == 1) return launch(quant_gemv_full_kernel<1>, grid, block, pl.smem, stream, p);
    return launch(quant_gemv_full_kernel<2>, grid, block, pl.smem, stream, p);
  }
  switch (pl.mt) {
    case 1: return launch_gemv_wu<BITS, 1>(p, pl, stream);
    case 2: return launch_gemv_wu<BITS, 2>(p, pl, stream);
    case 4: return launch_gemv_wu<BITS, 4>(p, pl, stream);
    default: return launch_gemv_wu<BITS, 8>(p, pl, stream);
  }
}

// ---- tensor-core GEMM variants: (BM, BN, BK, warps along M, warps along N) ----
constexpr int kGemmVariants = 5;
constexpr int kGemmDefault = 1;  // 4 warps of 64x64: 35-37% of the H200's fp16 matmul rate (run 1 sweep)

template <int BITS, int BM, int BN, int BK, int WM, int WN>
cudaError_t launch_gemm_cfg(const QuantGemmParams& p, cudaStream_t stream) {
  using C = GemmCfg<BITS, BM, BN, BK, WM, WN>;
  auto kernel = &quant_gemm_kernel<BITS, BM, BN, BK, WM, WN>;
  if (C::SMEM > 48 * 1024) {
    static bool raised[kMaxDevices];
    const int dev = current_device();
    if (!raised[dev]) {
      const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
      if (e != cudaSuccess) return e;
      raised[dev] = true;
    }
  }
  const dim3 grid((p.N + BN - 1) / BN, (p.M + BM - 1) / BM);
  kernel<<<grid, C::THREADS, C::SMEM, stream>>>(p);
  return cudaSuccess;
}

template <int BITS>
cudaError_t launch_gemm(const QuantGemmParams& p, int variant, cudaStream_t stream) {
  switch (variant) {
    case 1: return launch_gemm_cfg<BITS, 128, 128, 32, 2, 2>(p, stream);
    case 2: return launch_gemm_cfg<BITS, 256, 128, 32, 4, 2>(p, stream);
    case 3: return launch_gemm_cfg<BITS, 128, 256, 32, 2, 4>(p, stream);
    case 4: return launch_gemm_cfg<BITS, 128, 128, 64, 2, 4>(p, stream);
    default: return launch_gemm_cfg<BITS, 128, 128, 32, 2, 4>(p, stream);
  }
}

int gemm_variant() {
  return g_tune.gemm_variant >= 0 && g_tune.gemm_variant < kGemmVariants ? g_tune.gemm_variant : kGemmDefault;
}

bool bad_shape(int M, int N, int K, int bits, int group_size) {
  return M < 0 || N < 0 || K <= 0 || (bits != 4 && bits != 8) || K % 32 || N % 8 || group_size <= 0 ||
         group_size % 32 || K % group_size || N > kGemvCounterBytes / 4 * kGemvTile;
}

}  // namespace

extern "C" {

// Workspace bytes (zero-initialised once by the caller, then reusable by every later call on the same
// stream) that a call with these sizes needs; 0 = none.
int revolta_quant_gemm_workspace(int M, int N, int K, int bits, int group_size, int num_sms, long long* bytes) {
  if (bad_shape(M, N, K, bits, group_size) || num_sms <= 0) return cudaErrorInvalidValue;
  *bytes = M > 0 && M <= kSkinnyMaxM
               ? gemv_workspace_bytes(plan_gemv(M, N, K, bits, group_size, num_sms, 0, false), M, N)
               : 0;
  return cudaSuccess;
}

// The launch the call would make, for benchmark reports: info[0] = 0 skinny / 1 tensor-core GEMM; skinny:
// info[1..7] = splits, rows per split, warps per block, rows per step, blocks per SM, column tiles, deferred
// scale, L2-prefetched packed rows per block, PDL on, min blocks per SM of the kernel (4 = co-resident
// variant), split-K-free variant (quant_gemv_full.cuh); GEMM: info[1] = variant. `info` holds 12 ints.
int revolta_quant_plan(int M, int N, int K, int bits, int group_size, int num_sms, int* info) {
  if (bad_shape(M, N, K, bits, group_size) || num_sms <= 0) return cudaErrorInvalidValue;
  for (int i = 0; i < 12; ++i) info[i] = 0;
  if (M <= kSkinnyMaxM) {
    const GemvPlan pl = plan_gemv(M > 0 ? M : 1, N, K, bits, group_size, num_sms);
    const int v[12] = {0, pl.splits, pl.rows_per_split, pl.warps, pl.rows_step, pl.blocks_per_sm, pl.tiles, pl.defer,
                       pl.prefetch_rows, pdl_enabled() ? 1 : 0, pl.minb, pl.full};
    for (int i = 0; i < 12; ++i) info[i] = v[i];
  } else {
    info[0] = 1;
    info[1] = gemm_variant();
  }
  return cudaSuccess;
}

// Overrides of the launch parameters for sweeps (process-wide; 0 or -1 restores the built-in choice):
// skinny warps per block (4, 8), rows per step (4, 8), split policy (waves of resident blocks >= 1, or 0 for
// whole balanced waves), GEMM variant (0-4),
// skinny scale per weight (0) or deferred to the fp32 flush (1), skinny L2 prefetch budget of the whole grid
// before the PDL wait in KB (0 = none, -1 = default), share of the resident block slots the split-K plan fills
// (1 = all, 2 = half, 0 = default), skinny co-resident variant (4: the kernel compiled for 4 blocks per SM,
// <= 64 registers, where it exists: 8 warps x 4 rows, M <= 2, deferred scale; 0 = default), split-K-free
// variant (1 = wherever it exists, 0 = never, -1 = the built-in rule), skinny schedule flags (bits of
// kGemvFlagEarlyTrigger = 1, kGemvFlagOnePass = 2, kGemvFlagFull16 = 4, kGemvFlagFull16Plain = 8; -1 = default).
int revolta_quant_tune(int gemv_warps, int gemv_rows, int gemv_waves, int gemm_variant, int gemv_defer,
                       int gemv_prefetch_kb, int gemv_share, int gemv_minb, int gemv_full, int gemv_flags) {
  g_tune.gemv_flags = gemv_flags;
  g_tune.gemv_full = gemv_full;
  g_tune.gemv_minb = gemv_minb;
  g_tune.gemv_share = gemv_share;
  g_tune.gemv_defer = gemv_defer;
  g_tune.gemv_prefetch_kb = gemv_prefetch_kb;
  g_tune.gemv_warps = gemv_warps;
  g_tune.gemv_rows = gemv_rows;
  g_tune.gemv_waves = gemv_waves >= 0 ? gemv_waves : 1;
  g_tune.gemm_variant = gemm_variant;
  return cudaSuccess;
}

// out[M, N] (fp16) = a[M, K] (fp16) @ W, where a = x (act 0: x is [M, K]) or a = silu(gate) * up (act 1,
// M <= 8 only: x is [M, 2K] = [gate, up], the gate_up projection's output). Needs K % 32 == 0, N % 8 == 0,
// group_size % 32 == 0 dividing K, 16-byte aligned x, qweight and scales; `workspace` of
// revolta_quant_gemm_workspace() bytes.
int revolta_quant_gemm_act(void* out, const void* x, const void* qweight, const void* scales, const void* qzeros,
                           void* workspace, long long workspace_bytes, int M, int N, int K, int bits,
                           int group_size, int zero_offset, int num_sms, int act, cudaStream_t stream) {
  if (M == 0 || N == 0) return cudaSuccess;
  if (bad_shape(M, N, K, bits, group_size) || num_sms <= 0 || (act != 0 && act != 1)) return cudaErrorInvalidValue;
  if (act && M > kSkinnyMaxM) return cudaErrorInvalidValue;
  QuantGemmParams p{static_cast<const __half*>(x), static_cast<const uint32_t*>(qweight),
                    static_cast<const __half*>(scales), static_cast<const uint32_t*>(qzeros),
                    static_cast<__half*>(out), nullptr, nullptr, M, N, K, group_size, zero_offset, 0,
                    act ? 2 * K : K, act, 0};
  if (M <= kSkinnyMaxM) {
    const GemvPlan pl = plan_gemv(M, N, K, bits, group_size, num_sms, act);
    const long long need = gemv_workspace_bytes(pl, M, N);
    if (need > 0) {
      if (workspace == nullptr || workspace_bytes < need) return cudaErrorInvalidValue;
      p.counters = static_cast<int*>(workspace);
      p.partial = reinterpret_cast<float*>(static_cast<char*>(workspace) + kGemvCounterBytes);
    }
    p.rows_per_split = pl.rows_per_split;
    p.prefetch_rows = pl.prefetch_rows;
    p.flags = gemv_flags();
    const cudaError_t e = bits == 4 ? launch_gemv_mt<4>(p, pl, stream) : launch_gemv_mt<8>(p, pl, stream);
    return e != cudaSuccess ? e : cudaGetLastError();
  }
  const cudaError_t e = bits == 4 ? launch_gemm<4>(p, gemm_variant(), stream) : launch_gemm<8>(p, gemm_variant(), stream);
  return e != cudaSuccess ? e : cudaGetLastError();
}

// out[M, N] = rms_norm(h) @ W and h_out[M, K] = h for h = x + residual (residual may be null: h = x), M <= 8
// (the skinny kernel's act = 2 staging; the rounding of revolta_fused_add_rms_norm / revolta_rms_norm, then
// the GEMM). norm_weight [K] fp16, zero_centered: weight (1 + w). h_out must not alias x or residual.
// Alignment as revolta_quant_gemm_act, plus 16-byte aligned residual, norm_weight and h_out.
int revolta_quant_gemm_norm(void* out, void* h_out, const void* x, const void* residual, const void* norm_weight,
                            float eps, int zero_centered, const void* qweight, const void* scales,
                            const void* qzeros, void* workspace, long long workspace_bytes, int M, int N, int K,
                            int bits, int group_size, int zero_offset, int num_sms, cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  if (bad_shape(M, N, K, bits, group_size) || num_sms <= 0 || M > kSkinnyMaxM || N == 0 || h_out == nullptr ||
      norm_weight == nullptr || h_out == x || (residual != nullptr && h_out == residual))
    return cudaErrorInvalidValue;
  QuantGemmParams p{static_cast<const __half*>(x), static_cast<const uint32_t*>(qweight),
                    static_cast<const __half*>(scales), static_cast<const uint32_t*>(qzeros),
                    static_cast<__half*>(out), nullptr, nullptr, M, N, K, group_size, zero_offset, 0,
                    K, 2, 0, static_cast<const __half*>(residual), static_cast<const __half*>(norm_weight),
                    static_cast<__half*>(h_out), eps, zero_centered ? 1 : 0};
  const GemvPlan pl = plan_gemv(M, N, K, bits, group_size, num_sms, 2);
  const long long need = gemv_workspace_bytes(pl, M, N);
  if (need > 0) {
    if (workspace == nullptr || workspace_bytes < need) return cudaErrorInvalidValue;
    p.counters = static_cast<int*>(workspace);
    p.partial = reinterpret_cast<float*>(static_cast<char*>(workspace) + kGemvCounterBytes);
  }
  p.rows_per_split = pl.rows_per_split;
  p.prefetch_rows = pl.prefetch_rows;
  p.flags = gemv_flags();
  const cudaError_t e = bits == 4 ? launch_gemv_mt<4>(p, pl, stream) : launch_gemv_mt<8>(p, pl, stream);
  return e != cudaSuccess ? e : cudaGetLastError();
}

int revolta_quant_gemm(void* out, const void* x, const void* qweight, const void* scales, const void* qzeros,
                       void* workspace, long long workspace_bytes, int M, int N, int K, int bits, int group_size,
                       int zero_offset, int num_sms, cudaStream_t stream) {
  return revolta_quant_gemm_act(out, x, qweight, scales, qzeros, workspace, workspace_bytes, M, N, K, bits,
                                group_size, zero_offset, num_sms, 0, stream);
}

#if defined(REVOLTA_GEMV_PROBE)
// The timing probe's records (quant_gemv.cuh, -DREVOLTA_GEMV_PROBE builds only): copies up to `cap` records of
// 112 bytes (6 globaltimer + 6 clock64 u64, smid, block, N, K) to `host`, stores how many were written in
// *count (may exceed cap), and resets the buffer.
int revolta_gemv_probe_read(void* host, int cap, int* count) {
  unsigned int n = 0;
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaMemcpyFromSymbol(&n, g_gemv_probe_count, sizeof(n));
  const unsigned int take = n < static_cast<unsigned int>(cap) ? n : static_cast<unsigned int>(cap);
  const unsigned int lim = take < static_cast<unsigned int>(kGemvProbeCap) ? take : kGemvProbeCap;
  if (e == cudaSuccess && lim > 0) e = cudaMemcpyFromSymbol(host, g_gemv_probe, lim * sizeof(GemvProbeRec));
  const unsigned int zero = 0;
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_gemv_probe_count, &zero, sizeof(zero));
  *count = static_cast<int>(n);
  return e;
}
#endif

}  // extern "C"
