#include <cstdio>
#include <cuda_fp16.h>
#include <mma.h>
#include <cuda_pipeline.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
using namespace nvcuda;

// tensor cores through wmma: one 16x16x16 half tile per warp, f32 accumulate
extern "C" __global__ void wmma_tile(const half* a, const half* b, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    int tile = blockIdx.x;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a + tile * 256, 16);
    wmma::load_matrix_sync(fb, b + tile * 256, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c + tile * 256, fc, 16, wmma::mem_row_major);
}

// cp.async through the pipeline primitives, double-buffered
extern "C" __global__ void pipelined_scale(const float* x, float* y, float s, int n) {
    __shared__ float buf[2][256];
    int base = blockIdx.x * 512;
    for (int stage = 0; stage < 2; ++stage) {
        int i = base + stage * 256 + threadIdx.x;
        if (i < n) __pipeline_memcpy_async(&buf[stage][threadIdx.x], &x[i], sizeof(float));
        __pipeline_commit();
    }
    for (int stage = 0; stage < 2; ++stage) {
        __pipeline_wait_prior(1 - stage);
        __syncthreads();
        int i = base + stage * 256 + threadIdx.x;
        if (i < n) y[i] = s * buf[stage][threadIdx.x];
    }
}

// a device function kept out of line, and a local array indexed at run time
__device__ __noinline__ float poly(const float* coef, float x, int degree) {
    float r = 0.0f;
    for (int k = degree; k >= 0; --k) r = r * x + coef[k];
    return r;
}
extern "C" __global__ void horner_local(const float* x, float* y, int degree, int n) {
    float coef[8];
    for (int k = 0; k < 8; ++k) coef[k] = 1.0f / (k + 1);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = poly(coef, x[i], degree & 7);
}

// an atomicCAS loop: a float max no atomicMax covers
__device__ void atomic_max_f(float* addr, float v) {
    int* a = (int*)addr;
    int old = *a, assumed;
    do {
        assumed = old;
        if (__int_as_float(assumed) >= v) break;
        old = atomicCAS(a, assumed, __float_as_int(v));
    } while (old != assumed);
}
extern "C" __global__ void cas_max(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomic_max_f(out, x[i]);
}

// inline PTX, a warp vote and __syncwarp
extern "C" __global__ void asm_popc_vote(const unsigned* x, unsigned* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned v = i < n ? x[i] : 0u, p;
    asm("popc.b32 %0, %1;" : "=r"(p) : "r"(v));
    unsigned ballot = __ballot_sync(0xffffffffu, p > 16);
    __syncwarp();
    if (i < n) y[i] = p + __popc(ballot);
}

// cooperative groups: a tiled partition's reduction
extern "C" __global__ void cg_tile_sum(const float* x, float* out, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int o = tile.size() / 2; o > 0; o /= 2) v += tile.shfl_down(v, o);
    if (tile.thread_rank() == 0) atomicAdd(out, v);
}

// printf from a kernel (vprintf, a call with a local buffer)
extern "C" __global__ void checked_copy(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        if (v != v) printf("NaN at %d\n", i);
        y[i] = v;
    }
}
