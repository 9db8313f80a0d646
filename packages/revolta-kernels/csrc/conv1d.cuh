// Causal depthwise conv1d with per-sequence input tails kept in a slot pool (states [S, C, W], W = K - 1, the
// last W inputs, oldest first). Self-contained for NVRTC; fp32 math, fp16/bf16/fp32 storage.
// One thread per channel: loads and stores of x/out are coalesced across channels.
#pragma once

#include "common.cuh"
#include "pdl.cuh"

namespace revolta {

constexpr int kConvMaxWidth = 8;  // kernel sizes up to 8 (Qwen3-Next / Qwen3.5 use 4)
constexpr int kConvThreads = 128;
constexpr int kConvTokensPerThread = 16;

__device__ __forceinline__ float silu_f(float x) { return x / (1.f + expf(-x)); }

// acc + the causal conv of one channel at one token: weights wt[0 .. W) over its window hist[0 .. W) (the state,
// oldest first), then wt[W] times the token xv.
__device__ __forceinline__ float conv_window(const float (&wt)[kConvMaxWidth], const float (&hist)[kConvMaxWidth],
                                             float xv, int W, float acc) {
#pragma unroll
  for (int j = 0; j < kConvMaxWidth - 1; ++j) {
    if (j < W) acc += wt[j] * hist[j];
  }
#pragma unroll
  for (int j = 1; j < kConvMaxWidth; ++j) {
    if (j == W) acc += wt[j] * xv;
  }
  return acc;
}

// silu of one channel's conv without bias, rounded to the storage type (conv1d_update_kernel's output, as a float).
template <typename T>
__device__ __forceinline__ float conv_silu_channel(const float (&wt)[kConvMaxWidth],
                                                   const float (&hist)[kConvMaxWidth], float xv, int W) {
  return to_float(from_float<T>(silu_f(conv_window(wt, hist, xv, W, 0.f))));
}

// A channel's state after one token: the window hist shifted by one, the token appended.
template <typename T>
__device__ __forceinline__ void conv_shift_state(T* st, const float (&hist)[kConvMaxWidth], T newest, int W) {
#pragma unroll
  for (int j = 0; j < kConvMaxWidth - 1; ++j) {
    if (j + 1 < W) st[j] = from_float<T>(hist[j + 1]);
  }
  st[W - 1] = newest;
}

// Decode: one new token per sequence. x [B, C] (row stride x_stride), out [B, C] contiguous.
template <typename T>
__global__ void __launch_bounds__(kConvThreads)
    conv1d_update_kernel(T* __restrict__ out, const T* __restrict__ x, long long x_stride,
                         const T* __restrict__ weight, const T* __restrict__ bias, T* __restrict__ states,
                         const int64_t* __restrict__ state_indices, int C, int K, int silu) {
  const int c = blockIdx.x * kConvThreads + threadIdx.x, b = blockIdx.y;
  const int W = K - 1;
  // launched with PDL (pdl.cuh): the weights (nobody writes them) before the wait, the rest after
  float wt[kConvMaxWidth];
  const T* w = weight + static_cast<size_t>(c) * K;
#pragma unroll
  for (int j = 0; j < kConvMaxWidth; ++j) wt[j] = (c < C && j <= W) ? to_float(w[j]) : 0.f;
  float acc = (c < C && bias != nullptr) ? to_float(bias[c]) : 0.f;  // the conv adds to the bias
  pdl_wait();
  pdl_trigger();
  if (c >= C) return;
  const long long slot = state_indices[b];
  T* st = slot >= 0 ? states + (static_cast<size_t>(slot) * C + c) * W : nullptr;
  float hist[kConvMaxWidth];
#pragma unroll
  for (int j = 0; j < kConvMaxWidth - 1; ++j) hist[j] = (j < W && st != nullptr) ? to_float(st[j]) : 0.f;
  acc = conv_window(wt, hist, to_float(x[b * x_stride + c]), W, acc);
  out[static_cast<size_t>(b) * C + c] = from_float<T>(silu ? silu_f(acc) : acc);
  if (st != nullptr) conv_shift_state<T>(st, hist, x[b * x_stride + c], W);
}

// Input p of sequence b's extended stream [state (W), new tokens]: p < W comes from the old state.
template <typename T>
__device__ __forceinline__ float conv_input(const T* x, const T* st, int C, int c, int start, int p, int W) {
  if (p < W) return st != nullptr ? to_float(st[p]) : 0.f;
  return to_float(x[static_cast<size_t>(start + p - W) * C + c]);
}

// Prefill outputs of variable-length sequences (x, out [T, C] contiguous; sequence b owns rows
// query_start_loc[b]..[b+1]). Thread = channel x kConvTokensPerThread consecutive tokens, with a sliding window.
// Reads the old states only; conv1d_state_kernel writes the new ones afterwards.
template <typename T>
__global__ void __launch_bounds__(kConvThreads)
    conv1d_prefill_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                          const T* __restrict__ bias, const T* __restrict__ states,
                          const int* __restrict__ query_start_loc, const int64_t* __restrict__ state_indices,
                          int num_tokens, int num_seqs, int C, int K, int silu) {
  const int c = blockIdx.x * kConvThreads + threadIdx.x;
  const int t0 = blockIdx.y * kConvTokensPerThread;
  if (c >= C || t0 >= num_tokens) return;
  const int W = K - 1;
  float w[kConvMaxWidth];
#pragma unroll
  for (int j = 0; j < kConvMaxWidth; ++j) w[j] = j < K ? to_float(weight[static_cast<size_t>(c) * K + j]) : 0.f;
  const float bv = bias != nullptr ? to_float(bias[c]) : 0.f;
  // sequence of token t0: the last b with query_start_loc[b] <= t0
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (query_start_loc[mid] <= t0) lo = mid; else hi = mid - 1;
  }
  int b = lo;
  const int t_end = min(t0 + kConvTokensPerThread, num_tokens);
  float win[kConvMaxWidth];
  int start = 0, end = -1;
  const T* st = nullptr;
  for (int t = t0; t < t_end; ++t) {
    if (t >= end) {  // (re)start the window in the sequence that owns t
      while (query_start_loc[b + 1] <= t) ++b;
      start = query_start_loc[b];
      end = query_start_loc[b + 1];
      const long long slot = state_indices[b];
      st = slot >= 0 ? states + (static_cast<size_t>(slot) * C + c) * W : nullptr;
      const int i = t - start;
#pragma unroll
      for (int j = 0; j < kConvMaxWidth - 1; ++j) win[j] = j < W ? conv_input(x, st, C, c, start, i + j, W) : 0.f;
    } else {
#pragma unroll
      for (int j = 0; j < kConvMaxWidth - 2; ++j) win[j] = win[j + 1];
    }
    // win[0..W-1] hold inputs i .. i + W - 1 of the extended stream; the token itself is input i + W
    const float xv = to_float(x[static_cast<size_t>(t) * C + c]);
    float acc = bv;
#pragma unroll
    for (int j = 0; j < kConvMaxWidth - 1; ++j) {
      if (j < W) acc += w[j] * win[j];
    }
    acc += w[W] * xv;
    out[static_cast<size_t>(t) * C + c] = from_float<T>(silu ? silu_f(acc) : acc);
#pragma unroll
    for (int j = 0; j < kConvMaxWidth - 1; ++j) {
      if (j == W - 1) win[j + 1] = xv;  // after the shift, slot W - 1 receives this token
    }
  }
}

// New states after prefill: sequence b's last W inputs into its slot, and snapshots (inputs m .. m + W - 1 of
// the extended stream after m new tokens) into their slots. Sequences without new tokens keep their state.
template <typename T>
__global__ void __launch_bounds__(kConvThreads)
    conv1d_state_kernel(const T* __restrict__ x, T* __restrict__ states, const int* __restrict__ query_start_loc,
                        const int64_t* __restrict__ state_indices, const int* __restrict__ snap_offsets,
                        const int64_t* __restrict__ snap_len, const int64_t* __restrict__ snap_slot, int C, int K) {
  const int c = blockIdx.x * kConvThreads + threadIdx.x, b = blockIdx.y;
  if (c >= C) return;
  const int W = K - 1;
  const int start = query_start_loc[b], n = query_start_loc[b + 1] - start;
  const long long slot = state_indices[b];
  if (n == 0 || slot < 0) return;
  T* st = states + (static_cast<size_t>(slot) * C + c) * W;
  float old[kConvMaxWidth];
#pragma unroll
  for (int j = 0; j < kConvMaxWidth - 1; ++j) old[j] = j < W ? to_float(st[j]) : 0.f;
  auto input = [&](int p) -> T {
    if (p < W) {
      float v = 0.f;
#pragma unroll
      for (int j = 0; j < kConvMaxWidth - 1; ++j) v = j == p ? old[j] : v;
      return from_float<T>(v);
    }
    return x[static_cast<size_t>(start + p - W) * C + c];
  };
  if (snap_offsets != nullptr) {
    for (int s = snap_offsets[b]; s < snap_offsets[b + 1]; ++s) {
      const int m = static_cast<int>(snap_len[s]);
      T* d = states + (static_cast<size_t>(snap_slot[s]) * C + c) * W;
      for (int j = 0; j < W; ++j) d[j] = input(m + j);
    }
  }
  for (int j = 0; j < W; ++j) st[j] = input(n + j);
}

}  // namespace revolta
