// scan_inclusive: block-level inclusive prefix sum (Hillis-Steele, double-buffered in
// dynamic shared memory of 2 * blockDim.x floats). Each block scans its own blockDim.x
// consecutive elements independently: y[i] = sum of x[block start .. i].
extern "C" __global__ void scan_inclusive(const float* x, float* y, unsigned n) {
    extern __shared__ float buf[];
    const unsigned tid = threadIdx.x;
    const unsigned i = blockIdx.x * blockDim.x + tid;
    float* src = buf;
    float* dst = buf + blockDim.x;
    src[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned offset = 1; offset < blockDim.x; offset <<= 1) {
        float v = src[tid];
        if (tid >= offset) v += src[tid - offset];
        dst[tid] = v;
        __syncthreads();
        float* t = src;
        src = dst;
        dst = t;
    }
    if (i < n) y[i] = src[tid];
}
