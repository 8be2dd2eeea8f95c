// layernorm: y = (x - mean) / sqrt(var + eps) * gamma + beta over each row of a rows x cols
// row-major matrix (biased variance, two passes), one block per row (gridDim.x == rows).
#include "block_reduce.cuh"

extern "C" __global__ void layernorm(const float* x, const float* gamma, const float* beta, float* y,
                                     unsigned cols, float eps) {
    __shared__ float scratch[33];
    const float* row = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    float s = 0.0f;
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    const float mean = block_sum(s, scratch) / (float)cols;
    float q = 0.0f;
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = row[c] - mean;
        q += d * d;
    }
    const float rstd = rsqrtf(block_sum(q, scratch) / (float)cols + eps);
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x)
        out[c] = (row[c] - mean) * rstd * gamma[c] + beta[c];
}
