// Row kernels outside the suite (session 7): one block per row, work split by blockDim.
extern "C" __global__ void row_max(const float* x, float* out, int cols) {
    __shared__ float buf[1024];
    float m = -3.4e38f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, x[(size_t)blockIdx.x * cols + c]);
    buf[threadIdx.x] = m; __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) { if (threadIdx.x < s) buf[threadIdx.x] = fmaxf(buf[threadIdx.x], buf[threadIdx.x + s]); __syncthreads(); }
    if (threadIdx.x == 0) out[blockIdx.x] = buf[0];
}
extern "C" __global__ void row_l2_normalize(const float* x, float* y, int cols) {
    __shared__ float part[32];
    const float* row = x + (size_t)blockIdx.x * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) { float v = row[c]; s += v * v; }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        float t = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffff, t, o);
        if (threadIdx.x == 0) part[0] = rsqrtf(t + 1e-12f);
    }
    __syncthreads();
    float inv = part[0];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) y[(size_t)blockIdx.x * cols + c] = row[c] * inv;
}
