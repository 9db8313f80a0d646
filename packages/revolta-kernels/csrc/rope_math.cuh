// The rotary arithmetic of one channel, shared by the rotary kernels (rotary.cuh) and the q/k/v projection's
// rotary epilogue (quant_gemv_rope.cuh), so the fused and separate paths round alike.
#pragma once

namespace revolta {

// The rotated value of a pair's first (x1 c - x2 s) or second (x2 c + x1 s) channel.
__device__ __forceinline__ float rotate_pair(float x1, float x2, float c, float s, bool first) {
  return first ? x1 * c - x2 * s : x2 * c + x1 * s;
}

}  // namespace revolta
