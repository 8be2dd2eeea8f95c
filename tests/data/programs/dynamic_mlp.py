"""An unseen program for the model path: an MLP block compiled with dynamic shapes
(``dynamic=True``), run at two batch sizes in turn, so that one compiled kernel is
launched at several sizes. Run as ``python dynamic_mlp.py STEPS``."""

import sys

import torch

torch.manual_seed(0)
block = torch.nn.Sequential(torch.nn.LayerNorm(1024), torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                            torch.nn.Linear(4096, 1024)).cuda().to(torch.bfloat16)
step = torch.compile(block, dynamic=True)
xs = [torch.randn(rows, 1024, device="cuda", dtype=torch.bfloat16) for rows in (3000, 4096)]
with torch.no_grad():
    for i in range(int(sys.argv[1])):
        y = step(xs[i % 2])
torch.cuda.synchronize()
print("checksum", float(y.float().sum()))
