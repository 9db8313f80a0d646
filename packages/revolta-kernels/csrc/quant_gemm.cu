// C ABI of the quantized GEMM (quant_gemv.cuh for M <= 8, quant_gemm.cuh above): shape checks that need no
// device access, the launch plan (quant_gemv_plan.cuh: K splits from the kernel's occupancy), launch on the
// caller's stream.
#include <cuda_runtime.h>

#include "quant_gemm.cuh"
#include "quant_gemv_plan.cuh"

namespace {

// Launched with programmatic dependent launch where available (pdl.cuh; the kernel keeps its contract).
template <int BITS, int MT, int W, int U>
cudaError_t launch_gemv(const QuantGemmParams& p, const GemvPlan& pl, cudaStream_t stream) {
  const dim3 grid(pl.tiles, pl.splits);
  if constexpr (MT <= 2 && W == 8 && U == 4) {
    if (pl.minb == kGemvCoMinb && pl.defer)
      return launch(quant_gemv_co_kernel<BITS, MT, W, U>, grid, dim3(W * 32), pl.smem, stream, p);
  }
  if constexpr (W == 8) {
    if (pl.xq) return launch(quant_gemv_dp4a_kernel<BITS, MT, U>, grid, dim3(W * 32), pl.smem, stream, p);
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
template <int BITS, int MT>
cudaError_t launch_gemv_gather(const QuantGemmParams& p, const GemvPlan& pl, cudaStream_t stream) {
  const dim3 grid(pl.tiles, pl.splits), block(8 * 32);
  if (pl.xq)
    return pl.rows_step == 8 ? launch(quant_gemv_gather_dp4a_kernel<BITS, MT, 8>, grid, block, pl.smem, stream, p)
                             : launch(quant_gemv_gather_dp4a_kernel<BITS, MT, 4>, grid, block, pl.smem, stream, p);
  return pl.rows_step == 8 ? launch(quant_gemv_gather_kernel<BITS, MT, 8>, grid, block, pl.smem, stream, p)
                           : launch(quant_gemv_gather_kernel<BITS, MT, 4>, grid, block, pl.smem, stream, p);
}
// The split-K-free kernel of the plan; act-order calls (p.x_order) take its gathering instantiation, whose shared
// memory also holds the block's copies of x and the norm weight.
template <int MT, int COLS, bool ROPE = false>
cudaError_t launch_full(const QuantGemmParams& p, const GemvPlan& pl, cudaStream_t stream) {
  const dim3 grid(pl.tiles), block(kGemvFullWarps * 32);
  if constexpr (COLS == 16) {
    if (pl.xq && p.x_order == nullptr)
      return launch(quant_gemv_whole_k_kernel<MT, COLS, ROPE, false, true>, grid, block, pl.smem, stream, p);
  }
  if (p.x_order != nullptr)
    return launch(quant_gemv_whole_k_kernel<MT, COLS, ROPE, true>, grid, block, gemv_full_gather_smem_bytes(MT, p.K),
                  stream, p);
  return launch(quant_gemv_whole_k_kernel<MT, COLS, ROPE>, grid, block, pl.smem, stream, p);
}
// order_code: the act-order kernel's code although p.x_order is null (revolta_quant_gemm_act's kActOrderCode).
template <int BITS>
cudaError_t launch_gemv_mt(const QuantGemmParams& p, const GemvPlan& pl, cudaStream_t stream, bool order_code = false) {
  if ((p.x_order != nullptr || order_code) && !pl.full) {  // plan_gemv(..., gather = true): 8 warps, deferred scale
    switch (pl.mt) {
      case 1: return launch_gemv_gather<BITS, 1>(p, pl, stream);
      case 2: return launch_gemv_gather<BITS, 2>(p, pl, stream);
      case 4: return launch_gemv_gather<BITS, 4>(p, pl, stream);
      default: return launch_gemv_gather<BITS, 8>(p, pl, stream);
    }
  }
  if (pl.full) {
    if (pl.minb == 3) return pl.mt == 1 ? launch_full<1, 16>(p, pl, stream) : launch_full<2, 16>(p, pl, stream);
    return pl.mt == 1 ? launch_full<1, 32>(p, pl, stream) : launch_full<2, 32>(p, pl, stream);
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
constexpr int kGemmDefault = 1;  // 4 warps of 64x64: 35-37% of the H200's fp16 matmul rate, the best of the sweep

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

// A call of revolta_quant_gemm_norm(_rope) the kernels cannot take.
bool bad_norm_call(const void* h_out, const void* x, const void* residual, const void* norm_weight, int M, int N, int K,
                   int bits, int group_size, int num_sms) {
  return bad_shape(M, N, K, bits, group_size) || num_sms <= 0 || M > kSkinnyMaxM || N == 0 || h_out == nullptr ||
         norm_weight == nullptr || h_out == x || (residual != nullptr && h_out == residual);
}

// The act = 2 (residual add + RMSNorm) parameters of a skinny call, before its plan.
QuantGemmParams norm_params(void* out, void* h_out, const void* x, const void* residual, const void* norm_weight,
                            float eps, int zero_centered, const void* qweight, const void* scales, const void* qzeros,
                            int M, int N, int K, int group_size, int zero_offset, const void* x_order) {
  QuantGemmParams p{static_cast<const __half*>(x), static_cast<const uint32_t*>(qweight),
                    static_cast<const __half*>(scales), static_cast<const uint32_t*>(qzeros),
                    static_cast<__half*>(out), nullptr, nullptr, M, N, K, group_size, zero_offset, 0,
                    K, 2, 0, static_cast<const __half*>(residual), static_cast<const __half*>(norm_weight),
                    static_cast<__half*>(h_out), eps, zero_centered ? 1 : 0};
  p.x_order = static_cast<const int*>(x_order);
  return p;
}

// An act-order input order for a skinny call (null: none): 16-byte aligned (its rows are read as int4), K <= 65536
// (the kernels keep the indices as 16-bit values in shared memory).
bool bad_order(const void* x_order, int M, int K) {
  return x_order != nullptr && (M > kSkinnyMaxM || K > 65536 || reinterpret_cast<uintptr_t>(x_order) % 16 != 0);
}

}  // namespace

extern "C" {

// Workspace bytes (zero-initialised once by the caller, then reusable by every later call on the same
// stream) that a call with these sizes needs; 0 = none.
int revolta_quant_gemm_workspace(int M, int N, int K, int bits, int group_size, int num_sms, long long* bytes) {
  if (bad_shape(M, N, K, bits, group_size) || num_sms <= 0) return cudaErrorInvalidValue;
  // the larger of the plain and the act-order plan (they differ only under launch overrides)
  *bytes = M > 0 && M <= kSkinnyMaxM
               ? std::max(gemv_workspace_bytes(plan_gemv(M, N, K, bits, group_size, num_sms, 0, false), M, N),
                          gemv_workspace_bytes(plan_gemv(M, N, K, bits, group_size, num_sms, 0, false, true), M, N))
               : 0;
  return cudaSuccess;
}

// The launch the call would make, for benchmark reports: info[0] = 0 skinny / 1 tensor-core GEMM; skinny:
// info[1..7] = splits, rows per split, warps per block, rows per step, blocks per SM, column tiles, deferred
// scale, L2-prefetched packed rows per block, PDL on, min blocks per SM of the kernel (4 = co-resident
// variant), split-K-free variant (quant_gemv_whole_k.cuh), int8 activations (quant_gemv_dp4a.cuh) for a call with
// int8_x; GEMM: info[1] = variant. `info` holds 13 ints.
int revolta_quant_plan(int M, int N, int K, int bits, int group_size, int num_sms, int int8_x, int* info) {
  if (bad_shape(M, N, K, bits, group_size) || num_sms <= 0) return cudaErrorInvalidValue;
  for (int i = 0; i < 13; ++i) info[i] = 0;
  if (M <= kSkinnyMaxM) {
    const GemvPlan pl = plan_gemv(M > 0 ? M : 1, N, K, bits, group_size, num_sms, 0, true, false, int8_x != 0);
    const int v[13] = {0, pl.splits, pl.rows_per_split, pl.warps, pl.rows_step, pl.blocks_per_sm, pl.tiles, pl.defer,
                       pl.prefetch_rows, pdl_enabled() ? 1 : 0, pl.minb, pl.full, pl.xq};
    for (int i = 0; i < 13; ++i) info[i] = v[i];
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
// kGemvFlagEarlyTrigger = 1, kGemvFlagOnePass = 2, kGemvFlagFull16 = 4, kGemvFlagFull16Plain = 8,
// -1 = default; kGemvFlagInt8X is ignored: int8 activations are a per-call argument).
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
// revolta_quant_gemm_workspace() bytes. x_order (act-order GPTQ, M <= 8 only; null = none): int32 [K],
// 16-byte aligned; element k of a is channel x_order[k] (of x, or of gate and up).
// act | kActOrderCode: a schedule hint with identical results (M <= 8; larger M ignore it) - the split-K call
// runs the act-order kernel's code without a gather. act | kActInt8X: the skinny kernels (M <= 8) round the
// activations to int8 and multiply with dp4a (quant_gemv_dp4a.cuh; not bit-equal to fp16 activations). A down projection whose input order was folded into an
// act-order gate/up projection is ~2 us faster per layer in the same kernel function as that gate/up (H200).
int revolta_quant_gemm_act(void* out, const void* x, const void* qweight, const void* scales, const void* qzeros,
                           void* workspace, long long workspace_bytes, int M, int N, int K, int bits,
                           int group_size, int zero_offset, int num_sms, int act, const void* x_order,
                           cudaStream_t stream) {
  if (M == 0 || N == 0) return cudaSuccess;
  const bool order_code = (act & kActOrderCode) != 0, int8_x = (act & kActInt8X) != 0;
  act &= ~(kActOrderCode | kActInt8X);
  if (bad_shape(M, N, K, bits, group_size) || num_sms <= 0 || (act != 0 && act != 1) || bad_order(x_order, M, K))
    return cudaErrorInvalidValue;
  if (act && M > kSkinnyMaxM) return cudaErrorInvalidValue;
  QuantGemmParams p{static_cast<const __half*>(x), static_cast<const uint32_t*>(qweight),
                    static_cast<const __half*>(scales), static_cast<const uint32_t*>(qzeros),
                    static_cast<__half*>(out), nullptr, nullptr, M, N, K, group_size, zero_offset, 0,
                    act ? 2 * K : K, act, 0};
  p.x_order = static_cast<const int*>(x_order);
  if (M <= kSkinnyMaxM) {
    const GemvPlan pl =
        plan_gemv(M, N, K, bits, group_size, num_sms, act, true, x_order != nullptr || order_code, int8_x);
    const long long need = gemv_workspace_bytes(pl, M, N);
    if (need > 0) {
      if (workspace == nullptr || workspace_bytes < need) return cudaErrorInvalidValue;
      p.counters = static_cast<int*>(workspace);
      p.partial = reinterpret_cast<float*>(static_cast<char*>(workspace) + kGemvCounterBytes);
    }
    p.rows_per_split = pl.rows_per_split;
    p.prefetch_rows = pl.prefetch_rows;
    p.flags = gemv_flags();
    const cudaError_t e = bits == 4 ? launch_gemv_mt<4>(p, pl, stream, order_code)
                                    : launch_gemv_mt<8>(p, pl, stream, order_code);
    return e != cudaSuccess ? e : cudaGetLastError();
  }
  const cudaError_t e = bits == 4 ? launch_gemm<4>(p, gemm_variant(), stream) : launch_gemm<8>(p, gemm_variant(), stream);
  return e != cudaSuccess ? e : cudaGetLastError();
}

// out[M, N] = rms_norm(h) @ W and h_out[M, K] = h for h = x + residual (residual may be null: h = x), M <= 8
// (the skinny kernel's act = 2 staging; the rounding of revolta_fused_add_rms_norm / revolta_rms_norm, then
// the GEMM). norm_weight [K] fp16, zero_centered: weight (1 + w). h_out must not alias x or residual.
// Alignment as revolta_quant_gemm_act, plus 16-byte aligned residual, norm_weight and h_out. x_order as there:
// the GEMM sees channel x_order[k] of rms_norm(h) as element k; h_out stays in channel order. int8_x: int8
// activations, as revolta_quant_gemm_act's kActInt8X.
int revolta_quant_gemm_norm(void* out, void* h_out, const void* x, const void* residual, const void* norm_weight,
                            float eps, int zero_centered, const void* qweight, const void* scales,
                            const void* qzeros, void* workspace, long long workspace_bytes, int M, int N, int K,
                            int bits, int group_size, int zero_offset, int num_sms, const void* x_order, int int8_x,
                            cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  if (bad_norm_call(h_out, x, residual, norm_weight, M, N, K, bits, group_size, num_sms) || bad_order(x_order, M, K))
    return cudaErrorInvalidValue;
  QuantGemmParams p = norm_params(out, h_out, x, residual, norm_weight, eps, zero_centered, qweight, scales, qzeros, M,
                                  N, K, group_size, zero_offset, x_order);
  const GemvPlan pl = plan_gemv(M, N, K, bits, group_size, num_sms, 2, true, x_order != nullptr, int8_x != 0);
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

// revolta_quant_gemm_norm for a q/k/v projection with the rotary + KV-cache epilogue (GemvRope, quant_gemv_rope.cuh):
// q_out [M, H, D] receives the rotated queries, the caches the rotated keys and the values, h_out h; nothing
// else is written (no [M, N] output). Taken (*taken = 1) where the plan is the 16-column split-K-free kernel
// (int4 g128, M <= 2, K % 1024 == 0, K <= 4096, the default schedule flags) and N = (H + 2 Hkv) D with
// D % 16 == 0 and rot_dim a multiple of 16 (neox) or 2 (gpt-j), at most D; else *taken = 0 and nothing runs
// (the caller runs the GEMM and the rotary + cache op). int8_x as revolta_quant_gemm_norm's.
int revolta_quant_gemm_norm_rope(void* h_out, const void* x, const void* residual, const void* norm_weight, float eps,
                                 int zero_centered, const void* qweight, const void* scales, const void* qzeros,
                                 int M, int N, int K, int bits, int group_size, int zero_offset, int num_sms,
                                 const void* x_order, const GemvRope* rope, int int8_x, int* taken,
                                 cudaStream_t stream) {
  *taken = 0;
  if (M == 0) return cudaSuccess;
  if (bad_norm_call(h_out, x, residual, norm_weight, M, N, K, bits, group_size, num_sms) || rope == nullptr ||
      bad_order(x_order, M, K))
    return cudaErrorInvalidValue;
  const GemvRope& r = *rope;
  const bool rope_ok = r.head_dim > 0 && r.head_dim % 16 == 0 && r.num_heads > 0 && r.num_kv_heads > 0 &&
                       N == (r.num_heads + 2 * r.num_kv_heads) * r.head_dim && r.rot_dim > 0 &&
                       r.rot_dim <= r.head_dim && r.rot_dim % (r.neox ? 16 : 2) == 0 && r.block_size > 0 &&
                       r.q_out && r.k_cache && r.v_cache && r.positions && r.slots && r.cos_sin;
  const GemvPlan pl = plan_gemv(M, N, K, bits, group_size, num_sms, 2, true, false, int8_x != 0);
  if (!rope_ok || !pl.full || pl.minb != 3) return cudaSuccess;
  QuantGemmParams p = norm_params(nullptr, h_out, x, residual, norm_weight, eps, zero_centered, qweight, scales,
                                  qzeros, M, N, K, group_size, zero_offset, x_order);
  p.rows_per_split = pl.rows_per_split;
  p.flags = gemv_flags();
  p.rope = r;
  *taken = 1;
  const cudaError_t e = pl.mt == 1 ? launch_full<1, 16, true>(p, pl, stream) : launch_full<2, 16, true>(p, pl, stream);
  return e != cudaSuccess ? e : cudaGetLastError();
}

int revolta_quant_gemm(void* out, const void* x, const void* qweight, const void* scales, const void* qzeros,
                       void* workspace, long long workspace_bytes, int M, int N, int K, int bits, int group_size,
                       int zero_offset, int num_sms, cudaStream_t stream) {
  return revolta_quant_gemm_act(out, x, qweight, scales, qzeros, workspace, workspace_bytes, M, N, K, bits,
                                group_size, zero_offset, num_sms, 0, nullptr, stream);
}


}  // extern "C"
