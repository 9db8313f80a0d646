// Mixture-of-experts for few tokens (decode): SwiGLU experts as GEMVs over only the selected experts' weights.
// Self-contained for NVRTC; fp16/bf16/fp32 storage, fp32 math, 16-byte weight loads, no tensor cores needed
// (a token's expert rows are read once; the work is memory-bound).
//
//   up:   act[t, k, j] = silu(x_t . w13[e_k, j]) * (x_t . w13[e_k, I + j])     (two (k, j) per warp)
//   down: out[t, n]    = sum_k w_k * (w2[e_k, n] . act[t, k])                   (one warp per n)
// An optional shared expert (its own intermediate size Is) runs as one more expert with weight
// sigmoid(x_t . shared_gate) (or 1 without a gate). Routing (softmax over E router logits, top-k,
// optional renormalisation, weights rounded to the storage type as transformers does) can run inside the up
// kernel, each block redoing it for its token (E <= 512, k <= 16), or come precomputed.
//
// The kernels live in moe_common.cuh (shared pieces), moe_v1.cuh, moe_v2.cuh and moe_v3.cuh, one kernel generation
// each; this header includes them all.
#pragma once

#include "moe_common.cuh"
#include "moe_v1.cuh"
#include "moe_v2.cuh"
#include "moe_v3.cuh"
