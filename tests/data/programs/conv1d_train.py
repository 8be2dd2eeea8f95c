"""An unseen program for the model path: a training step of a 1-D convolutional
classifier (Conv1d, GroupNorm, SiLU, mean pooling, cross-entropy with int64 labels) with
fp32 weights under bf16 autocast, the forward+backward and AdamW's step each compiled.
Run as ``python conv1d_train.py STEPS``."""

import sys

import torch

torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self, ch=256, classes=100):
        super().__init__()
        self.stem = torch.nn.Conv1d(16, ch, 5, padding=2)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.GroupNorm(8, ch), torch.nn.SiLU(),
                                torch.nn.Conv1d(ch, ch, 3, padding=1)) for _ in range(3))
        self.head = torch.nn.Linear(ch, classes)

    def forward(self, x):
        h = self.stem(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h.mean(dim=-1))


net = Net().cuda()
opt = torch.optim.AdamW(net.parameters(), lr=1e-3, foreach=True)
x = torch.randn(64, 16, 2048, device="cuda")
labels = torch.randint(0, 100, (64,), device="cuda")


@torch.compile
def loss_and_grads():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(net(x), labels)
    loss.backward()
    return loss


@torch.compile
def opt_step():
    opt.step()


for _ in range(int(sys.argv[1])):
    opt.zero_grad(set_to_none=False)
    loss = loss_and_grads()
    opt_step()
torch.cuda.synchronize()
print("loss", float(loss))
