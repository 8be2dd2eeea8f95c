"""An unseen program for the model path: two decoder layers (RMSNorm, rotary embeddings,
causal attention, SwiGLU MLP, residuals) in bf16, inference compiled with
``mode="reduce-overhead"``, so that Inductor's kernels run inside CUDA graphs after the
first steps. Run as ``python graphs_decoder.py STEPS``."""

import sys

import torch
import torch.nn.functional as F

torch.manual_seed(0)
D, HEADS, FF, TOKENS, BATCH = 1024, 8, 2816, 512, 8


def rms_norm(x, weight):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * weight


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.Parameter(torch.ones(D))
        self.norm2 = torch.nn.Parameter(torch.ones(D))
        self.qkv = torch.nn.Linear(D, 3 * D, bias=False)
        self.out = torch.nn.Linear(D, D, bias=False)
        self.gate_up = torch.nn.Linear(D, 2 * FF, bias=False)
        self.down = torch.nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q, k, v = self.qkv(rms_norm(x, self.norm1)).view(b, t, 3, HEADS, D // HEADS).unbind(2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, D))
        gate, up = self.gate_up(rms_norm(x, self.norm2)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer() for _ in range(2))
        pos = torch.arange(TOKENS, dtype=torch.float32)[:, None]
        freq = 1.0 / 10000 ** (torch.arange(0, D // HEADS // 2, dtype=torch.float32) / (D // HEADS // 2))
        self.register_buffer("cos", torch.cos(pos * freq)[None, :, None, :].to(torch.bfloat16))
        self.register_buffer("sin", torch.sin(pos * freq)[None, :, None, :].to(torch.bfloat16))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        return x


model = Decoder().cuda().to(torch.bfloat16).eval()
step = torch.compile(model, mode="reduce-overhead")
x = torch.randn(BATCH, TOKENS, D, device="cuda", dtype=torch.bfloat16)
with torch.no_grad():
    for _ in range(int(sys.argv[1])):
        y = step(x)
torch.cuda.synchronize()
print("checksum", float(y.float().sum()))
