// Probe kernels (session 11) unlike the other unseen sets: int8/uint8 widening, char4/uchar4
// and float2/float4 vectors, __restrict__/const/__ldg, two outputs of different types, an
// unrolled 4-per-thread tail, strided/gather/scatter access, runtime div/mod, select chains,
// bit intrinsics, fast intrinsics, a 32x33 shared transpose tile, a switch, a thread-0 exit,
// a double write, half2 intrinsics, a data-dependent do-while, bf16 conversion.
// nvcc -O3 -arch=sm_90 -ptx probe.cu -o probe.ptx
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" __global__ void i8_widen_sum(const signed char* a, const unsigned char* b, int* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (int)a[i] * 3 + (int)b[i];
}

extern "C" __global__ void char4_add(const char4* a, const uchar4* b, short* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        char4 p = a[i];
        uchar4 q = b[i];
        y[i] = (short)(p.x * q.x + p.y * q.y + p.z * q.z + p.w * q.w);
    }
}

extern "C" __global__ void float2_cmul(const float2* __restrict__ a, const float2* __restrict__ b,
                                       float2* __restrict__ c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float2 x = a[i], z = b[i];
        c[i] = make_float2(x.x * z.x - x.y * z.y, x.x * z.y + x.y * z.x);
    }
}

extern "C" __global__ void ldg_scale4(const float4* __restrict__ x, float4* __restrict__ y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float4 v = __ldg(&x[i]);
        y[i] = make_float4(v.x * s, v.y * s + 1.f, v.z * s, v.w * s - 1.f);
    }
}

extern "C" __global__ void two_outputs(const float* __restrict__ x, float* __restrict__ y,
                                       unsigned char* __restrict__ mask, float t, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = __ldg(x + i);
        y[i] = v * v;
        mask[i] = v > t;
    }
}

extern "C" __global__ void unroll4_tail(const float* x, float* y, float a, int n) {
    int base = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
#pragma unroll 4
    for (int k = 0; k < 4; ++k) {
        int i = base + k;
        if (i < n) y[i] = a * x[i] + 1.f;
    }
}

extern "C" __global__ void strided_read(const float* x, float* y, int stride, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i * stride] * 2.f;
}

extern "C" __global__ void gather(const float* x, const int* idx, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[idx[i]];
}

extern "C" __global__ void scatter_add(const float* x, const int* idx, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&y[idx[i]], x[i]);
}

extern "C" __global__ void divmod_rt(const int* x, int* q, int* r, int d, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = x[i];
        q[i] = v / d;
        r[i] = (unsigned)v % (unsigned)d;
    }
}

extern "C" __global__ void select_chain(const float* x, int* y, float a, float b, float c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v < a ? 0 : (v < b ? 1 : (v < c ? 2 : (v != v ? -1 : 3)));
    }
}

extern "C" __global__ void bit_ops(const unsigned* x, unsigned* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned v = x[i];
        unsigned w = __funnelshift_l(v, __brev(v), v & 31);
        y[i] = (unsigned)__popc(v) + ((unsigned)__clz(v) << 8) + w + __funnelshift_r(w, v, 7);
    }
}

extern "C" __global__ void fast_intrin(const float* x, const float* d, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = __fdividef(__expf(v), d[i]) + rsqrtf(fabsf(v) + 1.f);
    }
}

extern "C" __global__ void transpose32(const float* in, float* out, int rows, int cols) {
    __shared__ float tile[32][33];
    int x = blockIdx.x * 32 + threadIdx.x;
    int y = blockIdx.y * 32 + threadIdx.y;
    if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    if (x < rows && y < cols) out[y * rows + x] = tile[threadIdx.x][threadIdx.y];
}

extern "C" __global__ void switch_op(const float* x, float* y, int op, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        switch (op) {
        case 0: v = v + 1.f; break;
        case 1: v = v * v; break;
        case 2: v = fmaxf(v, 0.f); break;
        case 3: v = -v; break;
        default: v = 0.f;
        }
        y[i] = v;
    }
}

extern "C" __global__ void skip_thread0(const float* x, float* y, int n) {
    if (threadIdx.x == 0) return;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 0.5f;
}

extern "C" __global__ void write_twice(const float* a, const float* b, volatile float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = 0.f;
        y[i] += a[i] * b[i];
    }
}

extern "C" __global__ void half2_fma(const __half2* a, const __half2* b, __half2* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = __hadd2(__hmul2(a[i], b[i]), a[i]);
}

extern "C" __global__ void collatz_steps(const unsigned* x, int* steps, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned v = x[i] | 1u;
        int s = 0;
        do {
            v = (v & 1u) ? 3u * v + 1u : v >> 1;
            ++s;
        } while (v != 1u && s < 1000);
        steps[i] = s;
    }
}

extern "C" __global__ void bf16_round_trip(const float* x, __nv_bfloat16* y, float* back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __nv_bfloat16 h = __float2bfloat16_rn(x[i] * 0.5f);
        y[i] = h;
        back[i] = __bfloat162float(h);
    }
}

extern "C" __global__ void u8_to_f32_norm(const unsigned char* __restrict__ img, float* __restrict__ out,
                                          float mean, float inv_std, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = ((float)img[i] * (1.f / 255.f) - mean) * inv_std;
}

extern "C" __global__ void i16_sat_add(const short* a, const short* b, short* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int s = (int)a[i] + (int)b[i];
        y[i] = (short)max(-32768, min(32767, s));
    }
}
