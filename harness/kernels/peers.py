"""What a user would run instead of the kernel: PyTorch functions on the same inputs.

A spec names its peer as ``peer = "module:function"`` (for the suite, the functions here).
A peer function takes the kernel's inputs as a dict of torch tensors on the GPU (buffers,
shaped flat as the spec gives them) and Python numbers (scalars), by param name, and
returns the output the kernel writes (the spec's first output buffer), flat. It must do
the whole job in torch's ordinary way, as a user would write it: that is the bar evo's
best variant is compared with ("vs peer" in ``harness.tools.bench_peer`` and in a GPU run's
report.md, ``evo.run``).

``time_peer`` times a peer the way the harness's events timer times a kernel: a CUDA graph
of back-to-back calls replayed between events, with the spec's caches (cold: the calls
rotate among copies of the inputs, as ``harness.gpu.timing`` does for kernels). torch is
imported by the caller; nothing here runs without it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib

import numpy as np

from genomes.errors import EvoError

GRAPH_CALLS = 100  # calls per captured graph (the harness's events timer uses up to 256)
REPLAYS = 30


MOVED = {"harness.peers": "harness.kernels.peers"}  # a spec written before session 19 names these


def load_peer(name: str):
    """The function ``module:function`` names; EvoError when it cannot be found."""
    module_name, _, function = name.partition(":")
    module_name = MOVED.get(module_name, module_name)
    try:
        return getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError, ValueError) as err:
        raise EvoError(f"peer {name!r} cannot be loaded: {err}") from None


def time_graph_us(calls, torch) -> float:
    """Median µs per call over REPLAYS replays of a graph of about GRAPH_CALLS calls,
    cycling through ``calls`` (whole rounds, so no input set is reused early)."""
    n = len(calls)
    count = max(n, GRAPH_CALLS // n * n)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in calls[:3]:
            fn()  # warm-up outside the graph (lazy init, cuBLAS/cuDNN handles)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(count):
            calls[i % n]()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    samples = []
    for _ in range(REPLAYS):
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1000.0 / count)
    return float(np.median(samples))


@dataclasses.dataclass(frozen=True)
class PeerInputs:
    """The host half of a peer's timing: the inputs (NumPy, one seed) and the spec's NumPy
    reference outputs on them (None where it has none)."""

    inputs: dict
    want: dict | None


def peer_inputs(spec, seed: int = 5) -> PeerInputs:
    """``PeerInputs`` of ``spec`` for ``seed``: made on the host, before a GPU is held (at
    16M elements the draws and the reference take a second)."""
    from harness.gpu.input_sets import make_inputs, reference_outputs

    inputs = make_inputs(spec, seed)
    return PeerInputs(inputs, reference_outputs(spec, inputs))


def time_peer(spec, torch, seed: int = 5, prepared: PeerInputs | None = None) -> dict:
    """The peer's µs per call on the spec's inputs (timed as above), and whether its output
    agrees with the spec's NumPy reference (None where the spec has none). ``prepared``:
    ``peer_inputs(spec, seed)`` made beforehand."""
    from harness.gpu.timing import caches_note, cold_copies, set_bytes

    prepared = prepared or peer_inputs(spec, seed)
    inputs, want = prepared.inputs, prepared.want
    tensors = {p.name: (torch.from_numpy(np.ascontiguousarray(inputs[p.name])).cuda()
                        if p.kind == "buffer" else inputs[p.name].item()) for p in spec.params}
    peer = load_peer(spec.peer)
    out = peer(dict(tensors)).float().cpu().numpy().ravel()
    agrees = None
    if want is not None:
        expected = next(iter(want.values())).astype(np.float32)
        agrees = bool(np.allclose(out, expected, rtol=1e-4, atol=1e-5))
    nbytes = set_bytes(spec)
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    copies = cold_copies(nbytes, l2) if spec.caches == "cold" else 1
    sets = [dict(tensors)] + [{k: v.clone() if torch.is_tensor(v) else v
                               for k, v in tensors.items()} for _ in range(copies - 1)]
    us = time_graph_us([functools.partial(peer, t) for t in sets], torch)
    del sets
    torch.cuda.empty_cache()
    return {"peer": spec.peer, "peer_us": us, "peer_agrees": agrees,
            "peer_caches": caches_note(spec, nbytes, copies, l2)}


def prepare_peer(spec, gpus: tuple[int, ...] = ()) -> PeerInputs | dict | None:
    """What a peer's timing needs before it needs a GPU to itself: torch imported (seconds,
    the first time in a process), its CUDA context made on each of ``gpus`` (one of them
    will be lent; a context is made without running anything on the GPU) and
    ``peer_inputs``; or why torch cannot run it (a dict with ``reason``, what
    ``peer_or_reason`` returns); None when the spec names no peer."""
    if not spec.peer:
        return None
    try:
        import torch
    except ImportError:
        return {"peer": spec.peer, "reason": "torch is not installed here"}
    if not torch.cuda.is_available():
        return {"peer": spec.peer, "reason": "torch sees no GPU"}
    try:
        for gpu in gpus:
            torch.empty(1, device=f"cuda:{gpu}")  # an allocation: the context, no kernel
        return peer_inputs(spec)
    except Exception as err:
        return failure(spec, err)


def peer_or_reason(spec, gpu: int, prepared: PeerInputs | dict | None = None) -> dict | None:
    """``time_peer`` on GPU ``gpu`` where torch can run it, else why not (``reason``):
    what a run's report quotes. None when the spec names no peer. ``prepared``:
    ``prepare_peer(spec)``'s, made before the GPU was held (else made here)."""
    prepared = prepared if prepared is not None else prepare_peer(spec)
    if not isinstance(prepared, PeerInputs):
        return prepared
    import torch

    try:
        with torch.cuda.device(gpu):
            return time_peer(spec, torch, prepared=prepared)
    except Exception as err:  # a peer that fails says why; the run goes on
        return failure(spec, err)


def failure(spec, err: Exception) -> dict:
    """What a run's report quotes for a peer that could not be timed."""
    return {"peer": spec.peer, "reason": f"{type(err).__name__}: {err}"[:300]}


def _f():
    import torch.nn.functional as F

    return F


def relu(t):
    return _f().relu(t["x"])


def gelu(t):
    return _f().gelu(t["x"], approximate="tanh")


def softmax(t):
    return t["x"].view(-1, t["cols"]).softmax(-1).view(-1)


def layernorm(t):
    cols = t["cols"]
    return _f().layer_norm(t["x"].view(-1, cols), (cols,), t["gamma"], t["beta"],
                           t["eps"]).view(-1)


def saxpy(t):
    return t["y"].add_(t["x"], alpha=t["a"])  # in place, like the kernel (y is inout)


def vector_add(t):
    return t["x"] + t["y"]


def transpose(t):
    return t["inp"].view(t["rows"], t["cols"]).t().contiguous().view(-1)


def reduce_sum(t):
    return t["x"].view(-1, 512).sum(1)


def reduce_max(t):
    return t["x"].view(-1, 512).amax(1)


def batchnorm_infer(t):
    x = t["x"].view(-1, t["channels"], t["hw"])
    return _f().batch_norm(x, t["mean"], t["var"], t["gamma"], t["beta"], False, 0.0,
                           t["eps"]).view(-1)


def embedding_gather(t):
    return _f().embedding(t["idx"], t["table"].view(-1, t["dim"])).view(-1)


def attention(t):
    q, k, v = (t[n].view(1, 8, 128, 32) for n in ("Q", "K", "V"))
    return _f().scaled_dot_product_attention(q, k, v).reshape(-1)


# Kernels outside the suite (tests/data/unseen: nvcc and Triton output evo was not written
# for), so that evo bench on them says how far each is from what a user would call instead.

def silu(t):
    return _f().silu(t["x"])


def gelu_erf(t):
    return _f().gelu(t["x"])  # the exact (erf) form, torch's default


def log_abs1(t):
    import torch

    return torch.log1p(t["x"].abs())


def softplus_div(t):
    return _f().softplus(t["x"]) / t["d"]


def half_axpy(t):
    import torch

    return torch.add(t["y"], t["x"], alpha=t["a"])  # in f16, as the kernel's memory


def copy_i64(t):
    return t["dst"].copy_(t["src"])


def leaky_relu(t):
    return _f().leaky_relu(t["x"], t["slope"])


def sigmoid_scale(t):
    import torch

    return t["scale"] * torch.sigmoid(t["x"])


def rms_norm(t):
    return _f().rms_norm(t["x"].view(-1, t["n_cols"]), (t["n_cols"],), t["w"],
                         t["eps"]).view(-1)


def add_one_unguarded(t):
    return t["x"] + 1


def axpby_inplace(t):
    return t["y"].mul_(t["b"]).add_(t["x"], alpha=t["a"])  # in place, as the kernel


def clamp_i32(t):
    import torch

    return torch.clamp(t["x"], t["lo"], t["hi"])


def row_max(t):
    return t["x"].view(-1, t["cols"]).amax(1)


def row_l2_normalize(t):
    return _f().normalize(t["x"].view(-1, t["cols"]), dim=1).view(-1)


def sum_sq_128(t):
    # block b sums the squares of elements 256 b .. 256 b + 255 of every stride of
    # 256 x blocks elements (a grid-stride loop over pairs of 128)
    return t["x"].view(-1, t["out"].numel(), 256).square().sum((0, 2))


def argmin_blocks(t):
    return t["x"].view(-1, 256).amin(1)


def exp_f64(t):
    import torch

    return torch.exp(t["x"])


# libdevice math kernels (tests/data/unseen/math), each against torch's own function
def tanh(t):
    import torch

    return torch.tanh(t["x"])


def expm1(t):
    import torch

    return torch.expm1(t["x"])


def atan(t):
    import torch

    return torch.atan(t["x"])


def erfc(t):
    import torch

    return torch.erfc(t["x"])


def normcdf(t):
    import torch

    return torch.special.ndtr(t["x"])


def logistic(t):
    import torch

    return torch.sigmoid(t["x"])


def softsign(t):
    return _f().softsign(t["x"])


def mish(t):
    return _f().mish(t["x"])


def hardswish(t):
    return _f().hardswish(t["x"])
