"""An unseen program for the model path: a bf16 MLP compiled with
``mode="max-autotune-no-cudagraphs"`` and Triton as the only GEMM backend, so that its
matrix products are Inductor's Triton GEMM templates (tensor-core PTX) rather than cuBLAS.
Run as ``python autotune_mlp.py STEPS``."""

import sys

import torch
import torch._inductor.config as inductor_config

inductor_config.max_autotune_gemm_backends = "TRITON"
torch.manual_seed(0)
mlp = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 1024),
                          torch.nn.LayerNorm(1024)).cuda().to(torch.bfloat16)
step = torch.compile(mlp, mode="max-autotune-no-cudagraphs")
x = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
with torch.no_grad():
    for _ in range(int(sys.argv[1])):
        y = step(x)
torch.cuda.synchronize()
print("checksum", float(y.float().sum()))
