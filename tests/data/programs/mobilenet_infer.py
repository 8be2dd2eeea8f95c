"""An unseen program for the model path: torchvision's mobilenet_v3_large (no weights),
bf16, channels-last, inference under torch.compile; hardswish, squeeze-excite, depthwise
convolutions. Run as ``python mobilenet_infer.py STEPS [BATCH]``."""

import sys

import torch
import torchvision

torch.manual_seed(0)
steps = int(sys.argv[1])
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 64
net = torchvision.models.mobilenet_v3_large(weights=None).cuda().eval()
net = net.to(torch.bfloat16, memory_format=torch.channels_last)
x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.bfloat16)
x = x.to(memory_format=torch.channels_last)
step = torch.compile(net)
with torch.no_grad():
    for _ in range(steps):
        logits = step(x)
torch.cuda.synchronize()
print("checksum", float(logits.float().sum()))
