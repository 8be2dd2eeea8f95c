// relu: y[i] = max(x[i], 0), one element per thread.
extern "C" __global__ void relu(const float* x, float* y, unsigned n) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
