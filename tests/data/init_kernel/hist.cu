// nvcc -ptx -arch=sm_90 -O3 hist.cu -o hist.ptx (CUDA 13.0): kernels evo init-kernel infers specs from (tests/test_init_kernel_infer.py)
extern "C" __global__ void histogram256(const unsigned char* data, unsigned int* hist, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&hist[data[i]], 1u);
}
extern "C" __global__ void stencil(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > 0 && i < n - 1) out[i] = 0.25f * in[i - 1] + 0.5f * in[i] + 0.25f * in[i + 1];
}
