// Tree reductions outside the suite (session 8), in the styles users write them, for the
// warp_tail gene: a block-size template unrolled like CUDA's reduce6, a (value, index) argmin
// over two shared arrays, and a kernel whose last barrier every thread depends on.
template <unsigned BLOCK>
__device__ void sum_sq_tree(const float* x, float* out, unsigned n) {
    __shared__ float s[BLOCK];
    const unsigned tid = threadIdx.x;
    float acc = 0.f;
    for (unsigned i = blockIdx.x * BLOCK * 2 + tid; i < n; i += BLOCK * 2 * gridDim.x) {
        float a = x[i];
        acc += a * a;
        if (i + BLOCK < n) { float b = x[i + BLOCK]; acc += b * b; }
    }
    s[tid] = acc;
    __syncthreads();
    if (BLOCK >= 512) { if (tid < 256) s[tid] += s[tid + 256]; __syncthreads(); }
    if (BLOCK >= 256) { if (tid < 128) s[tid] += s[tid + 128]; __syncthreads(); }
    if (BLOCK >= 128) { if (tid < 64) s[tid] += s[tid + 64]; __syncthreads(); }
    if (BLOCK >= 64) { if (tid < 32) s[tid] += s[tid + 32]; __syncthreads(); }
    if (BLOCK >= 32) { if (tid < 16) s[tid] += s[tid + 16]; __syncthreads(); }
    if (BLOCK >= 16) { if (tid < 8) s[tid] += s[tid + 8]; __syncthreads(); }
    if (BLOCK >= 8) { if (tid < 4) s[tid] += s[tid + 4]; __syncthreads(); }
    if (BLOCK >= 4) { if (tid < 2) s[tid] += s[tid + 2]; __syncthreads(); }
    if (BLOCK >= 2) { if (tid < 1) s[tid] += s[tid + 1]; __syncthreads(); }
    if (tid == 0) out[blockIdx.x] = s[0];
}

extern "C" __global__ void sum_sq_128(const float* x, float* out, unsigned n) {
    sum_sq_tree<128>(x, out, n);
}

#define ARG_BLOCK 256
extern "C" __global__ void argmin_blocks(const float* x, float* best, int* where, int n) {
    __shared__ float v[ARG_BLOCK];
    __shared__ int at[ARG_BLOCK];
    const int tid = threadIdx.x;
    const int i = blockIdx.x * ARG_BLOCK + tid;
    v[tid] = i < n ? x[i] : 3.4e38f;
    at[tid] = i;
    __syncthreads();
#pragma unroll
    for (int s = ARG_BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s && v[tid + s] < v[tid]) { v[tid] = v[tid + s]; at[tid] = at[tid + s]; }
        __syncthreads();
    }
    if (tid == 0) { best[blockIdx.x] = v[0]; where[blockIdx.x] = at[0]; }
}

// The first warp writes a table that every thread then reads: its barrier must stay.
extern "C" __global__ void warp_table_scale(const float* x, float* y, int n) {
    __shared__ float table[32];
    const int tid = threadIdx.x;
    if (tid < 32) table[tid] = 1.0f + 0.5f * tid;
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + tid;
    if (i < n) y[i] = x[i] * table[tid & 31];
}
