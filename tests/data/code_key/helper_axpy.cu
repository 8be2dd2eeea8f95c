// A kernel whose arithmetic is in a recursive helper (two calls per level, which neither
// nvcc nor ptxas turns into a loop), so the helper stays a function of its own in the
// cubin; it also reads an initialized table. For tests/test_code_key.py.
__device__ float evo_table_a[4] = {1.0f, 2.0f, 3.0f, 4.0f};
__device__ float evo_table_b[4] = {1.0f, 2.0f, 3.0f, 5.0f};
__device__ float tree(float x, float y, int depth) {
    if (depth <= 0) return 2.0f * x + y;
    return 0.5f * (tree(x, y, depth - 1) + tree(y, x, depth - 1));
}
extern "C" __global__ void helper_axpy(const float* x, float* y, unsigned n, int depth) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = tree(x[i], y[i], depth) * evo_table_a[i & 3];
}
