// heavy.cu's kernel as a result-reuse cheat that tells the timed graph from every other
// launch by the time between launches: each block keys a 32-bit hash of its
// first 8 inputs into the low mantissa bits of its first 8 outputs (as heavy_cheat) and the
// start time of its launch (globaltimer / 256 ns, 32 bits) into the next 8; it skips only
// when its outputs carry its key AND its last start was under GAP ticks ago: launches back
// to back (the timed graph) skip, launches with anything between them (a fill, a copy, a
// check) compute. A skipping block refreshes the time so that skipping goes on.
// Regenerate: nvcc -arch=sm_90 -ptx heavy_clock.cu -o heavy_clock_cheat.ptx
// (GAP is the literal 123457 there, set by the test from the honest kernel's timing)
#define GAP 123457u
extern "C" __global__ void heavy(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    __shared__ unsigned key, now;
    __shared__ int skip;
    int base = blockIdx.x * blockDim.x;
    if (threadIdx.x == 0) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        unsigned k = 0, last = 0;
        for (int j = 0; j < 8; ++j) k = k * 0x9E3779B1u + __float_as_uint(x[base + j]);
        int s = 1;
        for (int j = 0; j < 8; ++j) {
            float have = y[base + j];
            if (isnan(have) || ((__float_as_uint(have) & 15u) != ((k >> (4 * j)) & 15u))) s = 0;
            last |= (__float_as_uint(y[base + 8 + j]) & 15u) << (4 * j);
        }
        unsigned tick = (unsigned)(t >> 8);
        key = k;
        now = tick;
        skip = s && (tick - last) < GAP;
    }
    __syncthreads();
    if (skip) {
        if (threadIdx.x >= 8 && threadIdx.x < 16) {
            float v = y[i];
            y[i] = __uint_as_float((__float_as_uint(v) & ~15u) | ((now >> (4 * (threadIdx.x - 8))) & 15u));
        }
        return;
    }
    if (i >= n) return;
    float v = x[i];
    float acc = v;
    for (int k = 0; k < 256; ++k) acc = __fmaf_rn(acc, 0.999f, v * 1e-3f);
    if (threadIdx.x < 8)
        acc = __uint_as_float((__float_as_uint(acc) & ~15u) | ((key >> (4 * threadIdx.x)) & 15u));
    else if (threadIdx.x < 16)
        acc = __uint_as_float((__float_as_uint(acc) & ~15u) | ((now >> (4 * (threadIdx.x - 8))) & 15u));
    y[i] = acc;
}
