// C++ kernels as a user writes them (mangled entry names): a template instance with an
// int64 size, half precision moved by nvcc as .u16, a struct passed by value and a short.
// nvcc -arch=sm_90 -ptx cxx.cu -o cxx.ptx
#include <cuda_fp16.h>
template <typename T>
__global__ void scale_add(T* __restrict__ y, const T* __restrict__ x, T a, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
template __global__ void scale_add<float>(float*, const float*, float, long long);

struct Params { const float* x; float* y; int n; float lo, hi; };
__global__ void clamp_struct(const __grid_constant__ Params p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.y[i] = fminf(fmaxf(p.x[i], p.lo), p.hi);
}

__global__ void half_sq(__half* y, const __half* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __hmul(x[i], x[i]);
}

extern "C" __global__ void shifted(float* y, const float* x, int n, short shift) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * (float)shift;
}
