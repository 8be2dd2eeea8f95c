// y = f32(q) * scale: a dequantize of fp8 e5m2. nvcc -arch=sm_90 -ptx
#include <cuda_fp8.h>

extern "C" __global__ void dequantize_e5m2(const __nv_fp8_e5m2* q, float* y, float scale, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = float(q[i]) * scale;
}
