// Mixture-of-experts for few tokens (decode): SwiGLU experts as GEMVs over only the selected experts' weights.
// Self-contained for NVRTC; fp16/bf16/fp32 storage, fp32 math, 16-byte weight loads, no tensor cores needed
// (a token's expert rows are read once; the work is memory-bound).
//
//   router: logits[t, e] = x_t . wr[e]    (moe_router.cuh; optionally with the residual add + RMSNorm before it)
//   up:     act[t, k, j] = silu(x_t . w13[e_k, j]) * (x_t . w13[e_k, I + j])     (moe_decode_up.cuh)
//   down:   out[t, n]    = sum_k w_k * (w2[e_k, n] . act[t, k])                   (moe_decode_down.cuh)
// An optional shared expert (its own intermediate size Is) runs as one more expert with weight
// sigmoid(x_t . shared_gate) (or 1 without a gate). Routing (softmax over E router logits, top-k, optional
// renormalisation, weights rounded to the storage type as transformers does) runs inside the up kernel, each block
// redoing it for its token (E <= 512, k <= 16), or comes precomputed.
// The decode chain is router (batch 1: router + norm) -> moe_route_up_kernel -> moe_down_kernel, each launched with
// PDL so it loads the weights it can name before its pdl_wait().
#pragma once

#include "moe_common.cuh"
#include "moe_decode_down.cuh"
#include "moe_decode_up.cuh"
#include "moe_router.cuh"
