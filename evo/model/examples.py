"""Example models for the model round trip, built in code with random weights (nothing is
downloaded): a decoder-only transformer (RMSNorm, rotary embeddings, attention, SwiGLU
MLP, residuals) in bf16 for inference, and a training step (forward, backward, AdamW).

    from evo.model import examples
    step, inputs = examples.decoder_inference(layers=2, dim=512, batch=8, tokens=512)
    step(*inputs)    # torch.compile'd: Inductor's Triton kernels plus cuBLAS and SDPA

Each builder returns ``(step, inputs)``: ``step`` compiled with ``torch.compile`` (default
mode), ``inputs`` a tuple of CUDA tensors; seeded, so two calls build the same model.
``step.eager`` is the same step without ``torch.compile`` (how far compiling alone moves
the outputs: the yardstick ``evo.model.verify`` holds evolved kernels to); a training
step also has ``step.reset()`` (back to the weights and optimizer state it started
from) and ``step.state()`` (the weights now), so that steps are compared from one state.
"""

from __future__ import annotations


def _modules():
    import torch
    from torch import nn
    from torch.nn import functional as F

    class RMSNorm(nn.Module):
        def __init__(self, dim: int, eps: float = 1e-6):
            super().__init__()
            self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

        def forward(self, x):
            variance = x.float().pow(2).mean(-1, keepdim=True)
            return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight

    def rotate(x, cos, sin):
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    class Block(nn.Module):
        def __init__(self, dim: int, heads: int, hidden: int):
            super().__init__()
            self.heads = heads
            self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim, bias=False)
            self.out = nn.Linear(dim, dim, bias=False)
            self.gate_up = nn.Linear(dim, 2 * hidden, bias=False)
            self.down = nn.Linear(hidden, dim, bias=False)

        def forward(self, x, cos, sin):
            b, t, d = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
            q, k, v = (y.transpose(1, 2) for y in (q, k, v))
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(attn.transpose(1, 2).reshape(b, t, d))
            gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    class Decoder(nn.Module):
        def __init__(self, layers: int, dim: int, heads: int, hidden: int, vocab: int, tokens: int):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.blocks = nn.ModuleList(Block(dim, heads, hidden) for _ in range(layers))
            self.norm = RMSNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False)
            head_dim = dim // heads
            freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
            angles = torch.outer(torch.arange(tokens).float(), freq)
            angles = torch.cat([angles, angles], dim=-1)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)

        def forward(self, ids):
            x = self.embed(ids)
            cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
            for block in self.blocks:
                x = block(x, cos, sin)
            return self.head(self.norm(x))

    return Decoder


def decoder(layers: int = 2, dim: int = 512, heads: int = 8, hidden: int | None = None,
            vocab: int = 8192, tokens: int = 512, dtype: str = "bfloat16", seed: int = 0):
    """The decoder module on the GPU, random weights from ``seed``."""
    import torch

    torch.manual_seed(seed)
    model = _modules()(layers, dim, heads, hidden or 4 * dim, vocab, tokens)
    return model.to(device="cuda", dtype=getattr(torch, dtype))


def decoder_inference(layers: int = 2, dim: int = 512, batch: int = 8, tokens: int = 512,
                      seed: int = 0, **options):
    """(compiled inference step: ids -> logits, (ids,)) of ``decoder``, bf16, no grad."""
    import torch

    model = decoder(layers, dim, tokens=tokens, seed=seed, **options).eval()
    ids = torch.randint(0, model.head.out_features, (batch, tokens), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(seed))
    compiled = torch.compile(model)

    def step(ids):
        with torch.no_grad():
            return compiled(ids)

    step.eager = _no_grad(model)
    return step, (ids,)


def decoder_training(layers: int = 2, dim: int = 256, batch: int = 8, tokens: int = 256,
                     seed: int = 0, **options):
    """(compiled training step: forward, cross-entropy, backward, AdamW; returns the loss,
    (ids, targets)) of a float32 ``decoder`` under bf16 autocast."""
    import torch
    from torch.nn import functional as F

    model = decoder(layers, dim, tokens=tokens, seed=seed, dtype="float32", **options).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    vocab = model.head.out_features
    ids = torch.randint(0, vocab, (batch, tokens), device="cuda", generator=gen)
    targets = torch.randint(0, vocab, (batch, tokens), device="cuda", generator=gen)

    def loss_of(ids, targets):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(ids)
        return F.cross_entropy(logits.float().view(-1, vocab), targets.view(-1))

    return _training_step(model, optimizer, loss_of), (ids, targets)


def _training_step(model, optimizer, loss_of):
    """The compiled training step of ``model``: ``loss_of(*inputs)`` compiled, its backward,
    ``optimizer``'s step compiled; returns the loss. ``step.eager`` is the same uncompiled,
    ``step.reset`` puts weights and optimizer back as they were here, ``step.state`` the
    weights."""
    import torch

    compiled_loss = torch.compile(loss_of)

    @torch.compile
    def update():
        optimizer.step()

    def step(*inputs):
        optimizer.zero_grad(set_to_none=True)
        loss = compiled_loss(*inputs)
        loss.backward()
        update()
        return loss.detach()

    def eager(*inputs):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(*inputs)
        loss.backward()
        optimizer.step()
        return loss.detach()

    # what a step computes is its loss and the weights it leaves: outputs are compared
    # from the same starting state (reset), the backward and AdamW kernels' work included
    start = ({k: v.clone() for k, v in model.state_dict().items()}, _copy(optimizer.state_dict()))

    def reset():
        model.load_state_dict(start[0])
        optimizer.load_state_dict(_copy(start[1]))

    step.eager, step.reset = eager, reset
    step.state = lambda: [p.detach() for p in model.parameters()]
    return step


def _no_grad(fn):
    import torch

    def call(*args):
        with torch.no_grad():
            return fn(*args)

    return call


def _copy(state):
    """A deep copy of an optimizer's state dict (its tensors cloned)."""
    import copy

    return copy.deepcopy(state)


def torchvision_inference(name: str = "resnet18", batch: int = 32, seed: int = 0):
    """(compiled inference step: images -> logits, (images,)) of the torchvision network
    ``name`` built without weights (random initialisation from ``seed``), bf16,
    channels-last: a model whose code evo's authors did not write."""
    import torch
    import torchvision

    torch.manual_seed(seed)
    model = getattr(torchvision.models, name)(weights=None).eval()
    model = model.to(device="cuda", dtype=torch.bfloat16, memory_format=torch.channels_last)
    images = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.bfloat16,
                         generator=torch.Generator(device="cuda").manual_seed(seed))
    images = images.contiguous(memory_format=torch.channels_last)
    compiled = torch.compile(model)

    def step(images):
        with torch.no_grad():
            return compiled(images)

    step.eager = _no_grad(model)
    return step, (images,)


TRANSFORMERS = {  # name: (config class, model class, config): small, random weights, no dropout
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",
             dict(vocab_size=16384, n_positions=1024, n_embd=768, n_layer=4, n_head=12,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                   num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048)),
    "bert": ("BertConfig", "BertForMaskedLM",
             dict(vocab_size=16384, hidden_size=768, num_hidden_layers=4, num_attention_heads=12,
                  intermediate_size=3072, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
}
"""Hugging Face transformers models built from a config in code (nothing downloaded): models
evo's authors did not write, each a small configuration of a real architecture. Dropout is
off, so that a step computes the same with and without evo's kernels (A/B compared)."""


def transformers_model(name: str, seed: int = 0):
    """A ``TRANSFORMERS`` model on the GPU, float32, random weights from ``seed``."""
    import torch
    import transformers

    if name not in TRANSFORMERS:
        raise ValueError(f"unknown transformers model {name!r}; one of {', '.join(TRANSFORMERS)}")
    config_class, model_class, options = TRANSFORMERS[name]
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(**options)
    return getattr(transformers, model_class)(config).cuda(), config.vocab_size


def transformers_inference(name: str = "llama", batch: int = 8, tokens: int = 512, seed: int = 0):
    """(compiled inference step: token ids -> logits, (ids,)) of ``TRANSFORMERS[name]`` in bf16."""
    import torch

    model, vocab = transformers_model(name, seed)
    model = model.to(torch.bfloat16).eval()
    ids = torch.randint(0, vocab, (batch, tokens), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(seed))
    compiled = torch.compile(model)

    def step(ids):
        with torch.no_grad():
            return compiled(input_ids=ids, use_cache=False).logits

    step.eager = _no_grad(lambda ids: model(input_ids=ids, use_cache=False).logits)
    return step, (ids,)


def transformers_training(name: str = "gpt2", batch: int = 8, tokens: int = 512, seed: int = 0):
    """(compiled training step: forward with the model's own loss, backward, AdamW; returns
    the loss, (ids,)) of ``TRANSFORMERS[name]``, float32 weights under bf16 autocast."""
    import torch

    model, vocab = transformers_model(name, seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, vocab, (batch, tokens), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(seed))

    def loss_of(ids):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return model(input_ids=ids, labels=ids).loss

    return _training_step(model, optimizer, loss_of), (ids,)
