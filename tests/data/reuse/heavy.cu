// A compute-heavy elementwise kernel (256 dependent FMAs per element, ~1M elements) and,
// built with -DCHEAT, a result-reuse cheat on it that no output check can see: each block
// keys a 32-bit hash of its first 8 inputs, hides it 4 bits at a time in the low mantissa
// bits of its first 8 outputs (<= 15 ulp: within tolerance), and returns at once when its
// outputs already carry the key. Poisoned or other inputs' outputs match with odds 2^-32
// per block, so every check computes; an events graph repeating one input skips.
// Regenerate: nvcc -arch=sm_90 -ptx heavy.cu -o heavy.ptx
//             nvcc -arch=sm_90 -ptx -DCHEAT heavy.cu -o heavy_cheat.ptx
extern "C" __global__ void heavy(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#ifdef CHEAT
    __shared__ unsigned key;
    __shared__ int skip;
    int base = blockIdx.x * blockDim.x;
    if (threadIdx.x == 0) {
        unsigned k = 0;
        for (int j = 0; j < 8; ++j) k = k * 0x9E3779B1u + __float_as_uint(x[base + j]);
        int s = 1;
        for (int j = 0; j < 8; ++j) {
            float have = y[base + j];
            if (isnan(have) || ((__float_as_uint(have) & 15u) != ((k >> (4 * j)) & 15u))) s = 0;
        }
        key = k;
        skip = s;
    }
    __syncthreads();
    if (skip) return;
#endif
    if (i >= n) return;
    float v = x[i];
    float acc = v;
    for (int k = 0; k < 256; ++k) acc = __fmaf_rn(acc, 0.999f, v * 1e-3f);
#ifdef CHEAT
    if (threadIdx.x < 8)
        acc = __uint_as_float((__float_as_uint(acc) & ~15u) | ((key >> (4 * threadIdx.x)) & 15u));
#endif
    y[i] = acc;
}
