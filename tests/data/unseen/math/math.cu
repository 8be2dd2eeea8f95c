// libdevice math as users' elementwise kernels call it (no fast-math), f32 and f64, for
// coarsen's reach through if-conversion (session 10): nvcc -O3 -arch=sm_90 -ptx math.cu -o math.ptx
#define UNARY(name, expr) \
    extern "C" __global__ void name(const float* x, float* y, int n) { \
        int i = blockIdx.x * blockDim.x + threadIdx.x; \
        if (i < n) { float v = x[i]; y[i] = expr; } \
    }
UNARY(k_tanh, tanhf(v))
UNARY(k_expm1, expm1f(v))
UNARY(k_atan, atanf(v))
UNARY(k_asin, asinf(v * 0.5f))
UNARY(k_cbrt, cbrtf(v))
UNARY(k_erfc, erfcf(v))
UNARY(k_lgamma, lgammaf(v))
UNARY(k_log2, log2f(fabsf(v) + 1.f))
UNARY(k_exp10, exp10f(v))
UNARY(k_sinh, sinhf(v))
UNARY(k_acosh, acoshf(fabsf(v) + 1.f))
UNARY(k_rcbrt, rcbrtf(v + 3.f))
UNARY(k_normcdf, normcdff(v))
UNARY(k_erfinv, erfinvf(v * 0.1f))
UNARY(k_logistic, 1.f / (1.f + expf(-v)))
UNARY(k_softsign, v / (1.f + fabsf(v)))
UNARY(k_mish, v * tanhf(log1pf(expf(v))))
UNARY(k_hardswish, v * fminf(fmaxf(v + 3.f, 0.f), 6.f) / 6.f)
UNARY(k_fmod, fmodf(v, 0.7f))
UNARY(k_sqrtdiv, sqrtf(fabsf(v)) / (v + 2.f))
extern "C" __global__ void k_where_nan(const float* x, const float* z, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    if (v > 2.f) { y[i] = z[i]; return; }
    if (v < -2.f) { y[i] = -z[i]; return; }
    y[i] = v;
}
extern "C" __global__ void k_double_tanh(const double* x, double* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = tanh(x[i]);
}

#define UNARYD(name, expr) \
    extern "C" __global__ void name(const double* x, double* y, int n) { \
        int i = blockIdx.x * blockDim.x + threadIdx.x; \
        if (i < n) { double v = x[i]; y[i] = expr; } \
    }
UNARYD(d_abs, fabs(v) * 0.5)
UNARYD(d_copysign, copysign(2.0, v))
UNARYD(d_ilogb, (double)ilogb(v + 3.0))
UNARYD(d_hi_bits, (double)(__double2hiint(v) & 0x7ff00000))
UNARYD(d_exp, exp(v))
UNARYD(d_rsqrt, rsqrt(fabs(v) + 1.0))
