// softmax: row-wise softmax of a rows x cols row-major matrix, one block per row
// (gridDim.x == rows), max-subtracted for stability. blockDim.x a multiple of 32.
#include "block_reduce.cuh"

extern "C" __global__ void softmax(const float* x, float* y, unsigned cols) {
    __shared__ float scratch[33];
    const float* row = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_max(m, scratch);
    float s = 0.0f;
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) s += expf(row[c] - m);
    s = block_sum(s, scratch);
    const float inv = 1.0f / s;
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) out[c] = expf(row[c] - m) * inv;
}
