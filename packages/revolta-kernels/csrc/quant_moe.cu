// C ABI of the quantized mixture-of-experts kernels: the experts' GEMV for few tokens (quant_moe.cuh,
// quant_moe_gemv_one_token.cuh), the down projection + weighted sum of one token (quant_moe_combine.cuh) and the
// tensor-core GEMM over rows sorted by expert (quant_moe_gemm.cuh). Shape checks that need no device access, launch on
// the caller's stream.
#include <cuda_runtime.h>

#include "quant_gemv_plan.cuh"
#include "quant_moe.cuh"
#include "quant_moe_combine.cuh"
#include "quant_moe_gemm.cuh"
#include "quant_moe_gemv_one_token.cuh"

namespace {

// The shapes revolta_quant_gemm takes (quant_gemm.cu).
bool bad_gemm_shape(int M, int N, int K, int bits, int group_size) {
  return M < 0 || N < 0 || K <= 0 || (bits != 4 && bits != 8) || K % 32 || N % 8 || group_size <= 0 ||
         group_size % 32 || K % group_size || N > kGemvCounterBytes / 4 * kGemvTile;
}

// Whether a sorted-rows MoE GEMM of R rows over E experts with depth K takes the short tile (quant_moe_gemm.cuh).
bool use_short_moe_gemm_tile(long long R, int E, int K) {
  return K % MoeGemmShort::BK == 0 && R <= static_cast<long long>(kMoeGemmShortMaxRowsPerExpert) * E;
}

}  // namespace

extern "C" {

// out[T, R, N] = in @ W[ids] (+ the shared_id row) for stacked quantized experts (quant_moe.cuh);
// cudaErrorInvalidValue for a shape the kernel does not take (the Python side checks first). One token runs
// quant_moe_gemv_one_token_kernel (quant_moe_gemv_one_token.cuh) where its shared memory fits, more tokens
// quant_moe_gemv_kernel. Both launch with PDL.
int revolta_quant_moe_gemv(const revolta::QuantMoeParams* p, int bits, cudaStream_t stream) {
  using namespace revolta;
  const int pack = bits == 4 ? 8 : bits == 8 ? 4 : 0;
  const int per_token = p->top_k + (p->shared_id >= 0 ? 1 : 0);
  if (p->T == 0 || per_token == 0 || p->N == 0) return cudaSuccess;
  if (pack == 0 || p->K <= 0 || p->K % 8 || p->K % pack || p->K > kQuantMoeMaxK || p->N % 4 || p->N % pack ||
      p->group_size <= 0 || p->group_size % pack || p->K % p->group_size || (p->act != 0 && p->act != 1) ||
      p->E <= 0 || p->T < 0 || p->top_k < 0 || p->shared_id >= p->E ||
      static_cast<long long>(p->T) * per_token > kQuantMoeMaxRows)
    return cudaErrorInvalidValue;
  const unsigned rows = static_cast<unsigned>(p->T * per_token);
  const int quads = quant_moe_one_token_quads(p->K / pack);
  const int one_token_smem = quant_moe_one_token_smem_bytes(p->K, p->group_size, bits, quads);
  if (p->T == 1 && one_token_smem <= kOneTokenMaxSmem) {
    const dim3 grid((p->N + 4 * quads - 1) / (4 * quads), rows);
    const size_t smem = static_cast<size_t>(one_token_smem);
    const dim3 block(kOneTokenThreads);
    if (bits == 4) {
      return quads == 8    ? launch(quant_moe_gemv_one_token_kernel<4, 8>, grid, block, smem, stream, *p)
             : quads == 16 ? launch(quant_moe_gemv_one_token_kernel<4, 16>, grid, block, smem, stream, *p)
                           : launch(quant_moe_gemv_one_token_kernel<4, 32>, grid, block, smem, stream, *p);
    }
    return quads == 8    ? launch(quant_moe_gemv_one_token_kernel<8, 8>, grid, block, smem, stream, *p)
           : quads == 16 ? launch(quant_moe_gemv_one_token_kernel<8, 16>, grid, block, smem, stream, *p)
                         : launch(quant_moe_gemv_one_token_kernel<8, 32>, grid, block, smem, stream, *p);
  }
  const dim3 grid((p->N + kQuantMoeCols - 1) / kQuantMoeCols, rows);
  const size_t smem = static_cast<size_t>(p->K) * sizeof(float);
  return bits == 4 ? launch(quant_moe_gemv_kernel<4>, grid, dim3(kQuantMoeThreads), smem, stream, *p)
                   : launch(quant_moe_gemv_kernel<8>, grid, dim3(kQuantMoeThreads), smem, stream, *p);
}

// out[T, N] = the weighted sum of every row's SiLU-and-mul + down projection, plus the gated shared expert's row
// (quant_moe_combine.cuh): revolta_quant_moe_gemv (act 1) and revolta_moe_combine in one launch, with PDL.
// cudaErrorInvalidValue for what the kernel does not take (the Python side checks first and runs the two kernels):
// act 1, 1 <= top_k <= kMoeMaxTopK, N % 8 == 0, every row's shared memory within kCombineMaxSmem, and x / gate
// given when shared_id >= 0.
int revolta_quant_moe_down_combine(const revolta::QuantMoeCombineParams* cp, int bits, cudaStream_t stream) {
  using namespace revolta;
  const QuantMoeParams* p = &cp->m;
  const int pack = bits == 4 ? 8 : bits == 8 ? 4 : 0;
  const int per_token = p->top_k + (p->shared_id >= 0 ? 1 : 0);
  if (p->T == 0 || p->N == 0) return cudaSuccess;
  if (pack == 0 || p->act != 1 || p->top_k < 1 || p->top_k > kMoeMaxTopK || p->K <= 0 || p->K % 8 || p->K % pack ||
      p->N % 8 || p->group_size <= 0 || p->group_size % pack || p->K % p->group_size || p->E <= 0 || p->T < 0 ||
      p->T > kQuantMoeMaxRows || p->shared_id >= p->E || cp->weights == nullptr || cp->out == nullptr ||
      (p->shared_id >= 0 && (cp->x == nullptr || cp->gate == nullptr)))
    return cudaErrorInvalidValue;
  const long long smem = static_cast<long long>(per_token) * quant_moe_combine_row_bytes(p->K, p->group_size, bits);
  if (smem > kCombineMaxSmem) return cudaErrorInvalidValue;
  const dim3 grid((p->N + kCombineCols - 1) / kCombineCols, static_cast<unsigned>(p->T));
  const dim3 block(static_cast<unsigned>(32 * per_token));
  return bits == 4 ? launch(quant_moe_down_combine_kernel<4>, grid, block, static_cast<size_t>(smem), stream, *cp)
                   : launch(quant_moe_down_combine_kernel<8>, grid, block, static_cast<size_t>(smem), stream, *cp);
}

// out = x @ W[e] over R rows sorted by expert (quant_moe_gemm.cuh): sorted row r belongs to expert e for offsets[e]
// <= r < offsets[e + 1] (device int64 [E + 1], non-decreasing); weights stacked [E, ...] as one layer each
// (quant_common.cuh's layout). Its A row is x row x_rows[r] / x_row_div (x_rows null: r) of the x_limit rows of x;
// its result goes to out row out_rows[r] (null: r) of out's R rows. silu: W's columns are [gate (N / 2), up (N / 2)]
// and out [R, N / 2] receives silu(gate) * up of the fp16-rounded results (N % 16 == 0). Rows outside every expert's
// rows get zeros. An index out of range reads zeros or is not written. The shapes as revolta_quant_gemm's (K % 32,
// N % 8, G | K); 16-byte aligned x and out. A plain launch.
int revolta_quant_moe_gemm_rows(void* out, const void* x, const void* qweight, const void* scales, const void* qzeros,
                                const long long* offsets, const long long* x_rows, const long long* out_rows,
                                long long x_limit, int R, int E, int N, int K, int bits, int group_size,
                                int zero_offset, int x_row_div, int silu, cudaStream_t stream) {
  using namespace revolta;
  if (bad_gemm_shape(R, N, K, bits, group_size) || E <= 0 || offsets == nullptr || x_limit < 0 || x_row_div <= 0 ||
      (silu != 0 && silu != 1) || (silu && N % 16 != 0))
    return cudaErrorInvalidValue;
  if (R == 0 || N == 0) return cudaSuccess;
  // the grid's row tiles: an upper bound, ceil(R / BM) + E (the counts live on the device)
  auto row_tiles = [&](int bm) { return (R + bm - 1) / bm + static_cast<long long>(E); };
  if (row_tiles(MoeGemmWide::BM) > 65535) return cudaErrorInvalidValue;
  QuantMoeGemmParams q{};
  q.g.x = static_cast<const __half*>(x);
  q.g.qweight = static_cast<const uint32_t*>(qweight);
  q.g.scales = static_cast<const __half*>(scales);
  q.g.qzeros = static_cast<const uint32_t*>(qzeros);
  q.g.out = static_cast<__half*>(out);
  q.g.M = R;
  q.g.N = N;
  q.g.K = K;
  q.g.group_size = group_size;
  q.g.zero_offset = zero_offset;
  q.offsets = offsets;
  q.map.x_rows = x_rows;
  q.map.out_rows = out_rows;
  q.map.x_limit = x_limit;
  q.map.out_limit = R;
  q.map.x_row_div = x_row_div;
  q.E = E;
  const dim3 block(kMoeGemmWM * kMoeGemmWN * 32);
  auto run = [&](auto tile) {
    using Tile = decltype(tile);
    const dim3 grid((N + Tile::BN - 1) / Tile::BN, static_cast<unsigned>(row_tiles(Tile::BM)));
    const auto kernel = bits == 4
                            ? (silu ? quant_moe_gemm_kernel<4, Tile, true> : quant_moe_gemm_kernel<4, Tile, false>)
                            : (silu ? quant_moe_gemm_kernel<8, Tile, true> : quant_moe_gemm_kernel<8, Tile, false>);
    kernel<<<grid, block, bits == 4 ? MoeGemmCfg<4, Tile>::SMEM : MoeGemmCfg<8, Tile>::SMEM, stream>>>(q);
  };
  if (use_short_moe_gemm_tile(R, E, K) && row_tiles(MoeGemmShort::BM) <= 65535) {
    run(MoeGemmShort{});
  } else {
    run(MoeGemmWide{});
  }
  return cudaGetLastError();
}

}  // extern "C"
