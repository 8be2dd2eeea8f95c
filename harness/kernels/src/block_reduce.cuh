// Block-wide sum / max for the row kernels (softmax, layernorm, cross_entropy, attention):
// warp shuffles, then one warp over the per-warp partials in shared memory. Every thread
// gets the result. blockDim.x must be a multiple of 32 (at most 1024) and every thread of
// the block must call it (it contains __syncthreads).
#pragma once
#include <math.h>

struct SumOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <class Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// scratch: 33 floats of shared memory, 32 per-warp partials plus the broadcast slot.
template <class Op>
__device__ __forceinline__ float block_reduce(float v, float* scratch, Op op, float identity) {
    const unsigned lane = threadIdx.x & 31u;
    const unsigned warp = threadIdx.x >> 5;
    const unsigned nwarps = blockDim.x >> 5;
    v = warp_reduce(v, op);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = warp_reduce(lane < nwarps ? scratch[lane] : identity, op);
        if (lane == 0) scratch[32] = v;
    }
    __syncthreads();
    // The next call writes scratch[0..31] only after everyone is past this barrier, and
    // scratch[32] only after its own first barrier, so one pair of barriers suffices.
    return scratch[32];
}

__device__ __forceinline__ float block_sum(float v, float* scratch) {
    return block_reduce(v, scratch, SumOp(), 0.0f);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
    return block_reduce(v, scratch, MaxOp(), -INFINITY);
}
