// gelu (tanh approximation): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// one element per thread.
extern "C" __global__ void gelu(const float* x, float* y, unsigned n) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = x[i];
        const float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(inner));
    }
}
