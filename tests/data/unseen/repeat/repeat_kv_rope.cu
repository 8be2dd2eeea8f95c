// GQA's repeat_kv fused into a rotary embedding, as a CUDA programmer writes it: each of
// the KV heads' rows is rotated and written for the 4 query heads that share it.
// x: [B, KVH, S, D] (bf16 as unsigned short bits), out: [B, KVH * 4, S, D], D = 64.
#include <cuda_bf16.h>
extern "C" __global__ void repeat_kv_rope(const __nv_bfloat16 *x, const float *inv_freq,
                                          __nv_bfloat16 *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;   // one output element (an exact grid)
    const int D = 64, S = 512, H = 16, REP = 4;
    int d = i % D, s = (i / D) % S, h = (i / (D * S)) % H, b = i / (D * S * H);
    int src = ((b * (H / REP) + h / REP) * S + s) * D;
    float angle = s * inv_freq[d % (D / 2)];
    float c = __cosf(angle), sn = __sinf(angle);
    float v = __bfloat162float(x[src + d]);
    float partner = __bfloat162float(x[src + (d + D / 2) % D]);
    float rot = d < D / 2 ? -partner : partner;
    out[i] = __float2bfloat16(v * c + rot * sn);
}
