// cross_entropy: per-row loss = logsumexp(logits[r, :]) - logits[r, labels[r]] for a
// rows x classes row-major matrix and int32 labels, one block per row (gridDim.x == rows).
#include "block_reduce.cuh"

extern "C" __global__ void cross_entropy(const float* logits, const int* labels, float* loss,
                                         unsigned classes) {
    __shared__ float scratch[33];
    const float* row = logits + (size_t)blockIdx.x * classes;
    float m = -INFINITY;
    for (unsigned c = threadIdx.x; c < classes; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_max(m, scratch);
    float s = 0.0f;
    for (unsigned c = threadIdx.x; c < classes; c += blockDim.x) s += expf(row[c] - m);
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) loss[blockIdx.x] = logf(s) + m - row[labels[blockIdx.x]];
}
