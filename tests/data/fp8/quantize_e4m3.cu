// y = e4m3(x * inv_scale): a per-tensor scaled quantize to fp8 e4m3, saturating (as
// Triton's fp8e4nv stores and torch's scaled casts do). nvcc -arch=sm_90 -ptx
#include <cuda_fp8.h>

extern "C" __global__ void quantize_e4m3(const float* x, __nv_fp8_e4m3* y, float inv_scale, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __nv_fp8_e4m3(x[i] * inv_scale);
}
