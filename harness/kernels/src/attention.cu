// attention: softmax(q K^T * scale) V for one query row per block, non-causal.
// Q, K, V, O are [heads, SEQ, HEAD_DIM] row-major; blockIdx.x is the query row,
// blockIdx.y the head, and thread j (blockDim.x == SEQ) scores key j.
#include "block_reduce.cuh"

#define SEQ 128
#define HEAD_DIM 32

extern "C" __global__ void attention(const float* Q, const float* K, const float* V, float* O, float scale) {
    __shared__ float q[HEAD_DIM];
    __shared__ float p[SEQ];
    __shared__ float scratch[33];
    const unsigned j = threadIdx.x;
    const size_t head = (size_t)blockIdx.y * SEQ * HEAD_DIM;
    const size_t qrow = head + (size_t)blockIdx.x * HEAD_DIM;
    if (j < HEAD_DIM) q[j] = Q[qrow + j] * scale;
    __syncthreads();
    const float* k = K + head + (size_t)j * HEAD_DIM;
    float s = 0.0f;
#pragma unroll
    for (int t = 0; t < HEAD_DIM; ++t) s += q[t] * k[t];
    const float m = block_max(s, scratch);
    const float e = expf(s - m);
    const float l = block_sum(e, scratch);
    p[j] = e / l;
    __syncthreads();
    if (j < HEAD_DIM) {
        const float* v = V + head + j;
        float acc = 0.0f;
#pragma unroll 8
        for (int t = 0; t < SEQ; ++t) acc += p[t] * v[t * HEAD_DIM];
        O[qrow + j] = acc;
    }
}
