// saxpy: y = a * x + y (y in place), one element per thread.
extern "C" __global__ void saxpy(const float* x, float* y, float a, unsigned n) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
