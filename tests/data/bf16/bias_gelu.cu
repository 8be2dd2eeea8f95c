// A bf16 kernel as models run them: y = gelu(x + bias[col]) over a rows x cols matrix,
// bf16 in and out, float inside (tanh approximation). Test data for bf16 buffers
// (tests/test_bf16.py, tests/test_bf16_gpu.py).
// Regenerate: nvcc -arch=sm_90 -ptx bias_gelu.cu -o bias_gelu.ptx
#include <cuda_bf16.h>

extern "C" __global__ void bias_gelu(const __nv_bfloat16* __restrict__ x,
                                     const __nv_bfloat16* __restrict__ bias,
                                     __nv_bfloat16* __restrict__ y, int n, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = __bfloat162float(x[i]) + __bfloat162float(bias[i % cols]);
    float inner = 0.7978845608f * (v + 0.044715f * v * v * v);
    y[i] = __float2bfloat16(0.5f * v * (1.0f + tanhf(inner)));
}
