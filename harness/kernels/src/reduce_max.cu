// reduce_max: one partial maximum per block, shared-memory tree reduction.
// Block b takes the maximum of x[b*2*BLOCK .. (b+1)*2*BLOCK) (each thread combines two
// elements while loading);
// launch with blockDim.x == BLOCK and gridDim.x == ceil(n / (2*BLOCK)).
#include <math.h>

#define BLOCK 256

extern "C" __global__ void reduce_max(const float* x, float* partial, unsigned n) {
    __shared__ float s[BLOCK];
    const unsigned tid = threadIdx.x;
    const unsigned i = blockIdx.x * (2 * BLOCK) + tid;
    float v = -INFINITY;
    if (i < n) v = x[i];
    if (i + BLOCK < n) v = fmaxf(v, x[i + BLOCK]);
    s[tid] = v;
    __syncthreads();
#pragma unroll
    for (unsigned stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (tid < stride) s[tid] = fmaxf(s[tid], s[tid + stride]);
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = s[0];
}
