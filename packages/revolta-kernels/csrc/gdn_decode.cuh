// Two more decode kernels of the gated delta rule (see gated_delta.cuh for the math and the one-item kernel):
//  - gdn_decode_persistent_kernel: the same op, but a grid sized to the GPU whose blocks walk the (sequence,
//    head, 64-column) items and fetch the next item's state into registers while they update the current one,
//    so state reads stay in flight between items instead of each block's load -> compute -> store running dry.
//  - gdn_decode_fused_kernel: the whole decode step of a Gated DeltaNet layer after its conv, for Dv = 128:
//    gating (g, beta from the a/b projections), the delta rule, and the gated RMSNorm of each head's output
//    with silu(z); one block per (head, sequence) holds all 128 columns, so the norm needs no second kernel.
//  - gdn_decode_fused_split_kernel: the same step with each head's 128 columns split over 4 blocks of 32
//    (4x the blocks: at batch 1 a 32-head layer has 128 blocks instead of 32, so the latency-bound step spreads
//    over the GPU). The delta rule is independent per value column; only the gated RMSNorm needs the whole
//    head: every block stores its columns' pre-norm output (already rounded to the storage type, so the store
//    is exact), and the last of the head's 4 blocks to arrive (an arrival counter per (sequence, head) in a
//    caller-owned zeroed buffer, re-armed by that block) reads them back and writes the normalised output.
//    Launched with PDL (pdl.cuh): only the norm weight / A_log / dt_bias are read before pdl_wait().
//    CONV = true also does the layer's conv1d update (conv1d.cuh, same arithmetic): each block convolves the q/k
//    channels of its key head and its 32 v channels; it shifts its v channels' conv states itself, while the
//    q/k channels' states, read by all 4 * (Hv / Hk) blocks of the key head, are shifted by the last of them to
//    arrive (a second arrival counter per (sequence, key head), after each block's reads).
// Self-contained for NVRTC; fp32 math, fp16/bf16/fp32 storage.
//
// The kernels: gdn_decode_persistent.cuh and gdn_decode_fused.cuh; this header includes both.
#pragma once

#include "gdn_decode_persistent.cuh"
#include "gdn_decode_fused.cuh"
