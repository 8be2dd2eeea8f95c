// gemm_tile: C[M x N] = A[M x K] @ B[K x N], row-major float32, one thread.
//
// Compiled once per size by harness/kernels/regenerate.py with -DGEMM_M=.. -DGEMM_N=..
// -DGEMM_K=.. so that each .ptx holds exactly one entry, gemm_tile_MxNxK. The loops are
// compile-time constant and fully unrolled, and the pointers are plain (no __restrict__):
// nvcc then emits scalar `ld.global.f32 %f, [%rd+offset]` with constant offsets from the
// parameter pointers, which is the raw material the PTX transforms (vectorize, reorder,
// cache policy) work on. The tiles are read into registers first (m*k + k*n loads, all
// before the first store): without that, nvcc must reload A and B for every output
// element (2*m*n*k loads), since a store to C might overwrite them.

#ifndef GEMM_M
#define GEMM_M 4
#define GEMM_N 6
#define GEMM_K 8
#endif

#define GEMM_CAT_(m, n, k) gemm_tile_##m##x##n##x##k
#define GEMM_NAME(m, n, k) GEMM_CAT_(m, n, k)

template <int M, int N, int K>
__device__ __forceinline__ void gemm_tile(const float* A, const float* B, float* C) {
    float a[M * K], b[K * N];
#pragma unroll
    for (int i = 0; i < M * K; ++i) a[i] = A[i];
#pragma unroll
    for (int i = 0; i < K * N; ++i) b[i] = B[i];
#pragma unroll
    for (int i = 0; i < M; ++i) {
#pragma unroll
        for (int j = 0; j < N; ++j) {
            float acc = 0.0f;
#pragma unroll
            for (int p = 0; p < K; ++p) acc += a[i * K + p] * b[p * N + j];
            C[i * N + j] = acc;
        }
    }
}

extern "C" __global__ void GEMM_NAME(GEMM_M, GEMM_N, GEMM_K)(const float* A, const float* B, float* C) {
    gemm_tile<GEMM_M, GEMM_N, GEMM_K>(A, B, C);
}
