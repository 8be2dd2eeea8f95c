"""An unseen program for the model path: fp8 inference of an MLP (per-row scaled e4m3
activations and weights, ``torch._scaled_mm`` in bf16 out), the quantize steps compiled by
Inductor. Run as ``python fp8_linear.py STEPS``."""

import sys

import torch

torch.manual_seed(0)
E4M3_MAX = 448.0


def quantize(t):
    scale = t.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12) / E4M3_MAX
    return (t.float() / scale).to(torch.float8_e4m3fn), scale


w1 = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16) * 0.02
w2 = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16) * 0.02
q1, s1 = quantize(w1)
q2, s2 = quantize(w2)


@torch.compile
def mlp(x):
    qx, sx = quantize(x)
    h = torch._scaled_mm(qx, q1.t(), scale_a=sx, scale_b=s1.t(), out_dtype=torch.bfloat16)
    qh, sh = quantize(torch.nn.functional.silu(h))
    return x + torch._scaled_mm(qh, q2.t(), scale_a=sh, scale_b=s2.t(), out_dtype=torch.bfloat16)


x = torch.randn(8192, 1024, device="cuda", dtype=torch.bfloat16)
with torch.no_grad():
    for _ in range(int(sys.argv[1])):
        y = mlp(x)
torch.cuda.synchronize()
print("checksum", float(y.float().sum()))
