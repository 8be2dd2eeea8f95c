"""An unseen program for the model path: a training step of a bag-of-tokens classifier
(an embedding looked up by int64 token ids, a mean over the sequence, a two-layer head,
cross-entropy), whose backward scatters into the embedding's gradient with atomic adds;
SGD with momentum, forward+backward and the step each compiled.
Run as ``python embedding_train.py STEPS``."""

import sys

import torch

torch.manual_seed(0)
VOCAB, DIM, SEQ, BATCH, CLASSES = 32000, 512, 256, 64, 50
embed = torch.nn.Embedding(VOCAB, DIM).cuda()
head = torch.nn.Sequential(torch.nn.Linear(DIM, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, CLASSES)).cuda()
params = list(embed.parameters()) + list(head.parameters())
opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
tokens = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda")
labels = torch.randint(0, CLASSES, (BATCH,), device="cuda")


@torch.compile
def loss_and_grads():
    loss = torch.nn.functional.cross_entropy(head(embed(tokens).mean(dim=1)), labels)
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
