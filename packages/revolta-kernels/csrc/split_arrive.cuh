// A block's arrival on a split-K counter (the in-kernel merges of the skinny GEMV and the decode attention).
// Self-contained for NVRTC; sm_70 has the instruction.
#pragma once

namespace revolta {

// Thread 0, after the block barrier that follows the block's partial stores: atomically adds 1 to the gpu-scope
// counter and returns the old value, with release semantics for those stores (cumulative: thread 0 observed them
// through the barrier) and acquire semantics for what the earlier arrivals released, so the last arrival's block
// may read every partial after its next barrier. One instruction where __threadfence(); atomicAdd();
// __threadfence() put a sequentially consistent fence on either side, an ordering this hand-off does not need.
__device__ __forceinline__ int split_arrive(int* counter) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(counter), "r"(1) : "memory");
  return old;
}

}  // namespace revolta
