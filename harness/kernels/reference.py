"""NumPy references for the suite's kernels, to check a baseline kernel's own outputs.

Each reference is `ref(inputs, spec) -> outputs`: `inputs` maps every param name to its
value (flat 1-D arrays for buffers, NumPy scalars for scalars), and the result maps every
`out` / `inout` buffer name to a flat array of the param's dtype and count. Shapes come from
the spec's `[meta]`, grid and block. Arithmetic is float64 and rounded once at the end, so
the reference is closer to the exact answer than any f32 kernel. A spec names its reference
with `reference = "<function name>"`; `REFERENCES` holds them all.

`random_inputs(spec, rng)` draws one input set as the spec's fills describe.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

Inputs = dict[str, np.ndarray]
REFERENCES: dict[str, Callable] = {}


def _reference(fn: Callable) -> Callable:
    REFERENCES[fn.__name__] = fn
    return fn


def random_inputs(spec, rng: np.random.Generator, xp=np) -> Inputs:
    """One input set for `spec`: every buffer filled per its fill (outputs zeroed), every scalar.

    Param order fixes the order of draws, so a seed gives the same inputs everywhere.
    ``xp``: the array module the buffers are made in (CuPy, with ``rng`` drawing on the
    GPU: ``harness.gpu.input_sets.make_inputs``).
    """
    from harness.dtypes import encodings

    values: Inputs = {}
    for p in spec.params:
        dtype = spec.numpy_dtype(p.dtype)
        if p.kind == "scalar":
            values[p.name] = dtype.type(p.value)
            continue
        if p.role == "out":
            values[p.name] = xp.zeros(p.count, dtype)
            continue
        encoding = encodings.of(p.dtype)
        narrow = {} if xp is np else draw_precision(dtype, encoding)
        if p.fill == "normal":
            drawn = rng.normal(p.mean, p.std, p.count, **narrow)
        elif p.fill == "uniform":
            drawn = rng.uniform(p.low, p.high, p.count, **narrow)
        elif p.fill == "int":
            drawn = rng.integers(int(p.low), int(p.high), p.count)
        else:
            drawn = xp.full(p.count, p.value, np.float32 if encoding else dtype)
        # bf16 and fp8 are kept as their bits (harness.dtypes.encodings): the values drawn, rounded
        values[p.name] = (encoding.from_float(drawn, xp) if encoding
                          else drawn.astype(dtype, copy=False))
    return values


def draw_precision(dtype: np.dtype, encoding) -> dict:
    """The float type a GPU draws a buffer's values in (``harness.gpu.input_sets``): float32
    for buffers of 32-bit floats or narrower (bf16 and fp8 round from float32 anyway), else
    float64: half the bytes drawn and converted. On resnet50's batch-norm kernels it cut the
    input sets' time by 18 % (H200, BENCHMARKS.md session 27; the rest was a generator made
    per set, see ``input_sets._DeviceDraws``). NumPy's draws stay float64: host-judged
    kernels keep the inputs they always had."""
    if encoding is not None or (dtype.kind == "f" and dtype.itemsize <= 4):
        return {"dtype": np.float32}
    return {}


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _f32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).ravel()


@_reference
def gemm(inputs: Inputs, spec) -> Inputs:
    """C = A @ B with m, n, k from [meta] (row-major)."""
    m, n, k = spec.meta["m"], spec.meta["n"], spec.meta["k"]
    return {"C": _f32(_f64(inputs["A"]).reshape(m, k) @ _f64(inputs["B"]).reshape(k, n))}


def _per_block(inputs: Inputs, spec, identity: float) -> np.ndarray:
    """x cut into [meta] per_block-sized pieces, one per block, padded with identity."""
    per_block, blocks = spec.meta["per_block"], spec.grid[0]
    n = int(inputs["n"])
    x = np.full(blocks * per_block, identity)
    x[:n] = inputs["x"][:n]
    return x.reshape(blocks, per_block)


@_reference
def reduce_sum(inputs: Inputs, spec) -> Inputs:
    """partial[b] = sum of block b's per_block elements."""
    return {"partial": _f32(_per_block(inputs, spec, 0.0).sum(axis=1))}


@_reference
def reduce_max(inputs: Inputs, spec) -> Inputs:
    """partial[b] = max of block b's per_block elements."""
    return {"partial": _f32(_per_block(inputs, spec, -np.inf).max(axis=1))}


def _rows(x: np.ndarray, cols: int) -> np.ndarray:
    return _f64(x).reshape(-1, cols)


@_reference
def softmax(inputs: Inputs, spec) -> Inputs:
    """Row-wise softmax."""
    x = _rows(inputs["x"], int(inputs["cols"]))
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"y": _f32(e / e.sum(axis=1, keepdims=True))}


@_reference
def vector_add(inputs: Inputs, spec) -> Inputs:
    """z = x + y."""
    return {"z": _f32(inputs["x"] + inputs["y"])}


@_reference
def layernorm(inputs: Inputs, spec) -> Inputs:
    """Row-wise layer norm with biased variance, then gamma * . + beta."""
    x = _rows(inputs["x"], int(inputs["cols"]))
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    y = (x - mean) / np.sqrt(var + float(inputs["eps"])) * _f64(inputs["gamma"]) + _f64(inputs["beta"])
    return {"y": _f32(y)}


@_reference
def relu(inputs: Inputs, spec) -> Inputs:
    """max(x, 0)."""
    return {"y": _f32(np.maximum(inputs["x"], np.float32(0)))}


@_reference
def gelu(inputs: Inputs, spec) -> Inputs:
    """GELU, tanh approximation."""
    x = _f64(inputs["x"])
    return {"y": _f32(0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3))))}


@_reference
def saxpy(inputs: Inputs, spec) -> Inputs:
    """y = a * x + y."""
    return {"y": _f32(float(inputs["a"]) * _f64(inputs["x"]) + _f64(inputs["y"]))}


@_reference
def scan_inclusive(inputs: Inputs, spec) -> Inputs:
    """Inclusive prefix sum restarted at every block of blockDim.x elements."""
    n, seg = int(inputs["n"]), spec.block[0]
    x = np.zeros(-(-n // seg) * seg)
    x[:n] = inputs["x"][:n]
    return {"y": _f32(np.cumsum(x.reshape(-1, seg), axis=1).ravel()[:n])}


@_reference
def attention(inputs: Inputs, spec) -> Inputs:
    """softmax(q K^T * scale) V per head and query row, non-causal."""
    shape = (spec.meta["heads"], spec.meta["seq"], spec.meta["head_dim"])
    q, k, v = (_f64(inputs[name]).reshape(shape) for name in "QKV")
    s = np.einsum("hqd,hkd->hqk", q, k) * float(inputs["scale"])
    p = np.exp(s - s.max(axis=2, keepdims=True))
    p /= p.sum(axis=2, keepdims=True)
    return {"O": _f32(np.einsum("hqk,hkd->hqd", p, v))}


@_reference
def embedding_gather(inputs: Inputs, spec) -> Inputs:
    """out[t] = table[idx[t]]."""
    dim, tokens = int(inputs["dim"]), int(inputs["n_tokens"])
    table = inputs["table"].reshape(-1, dim)
    return {"out": _f32(table[inputs["idx"][:tokens].astype(np.int64)])}


@_reference
def cross_entropy(inputs: Inputs, spec) -> Inputs:
    """loss[r] = logsumexp(logits[r]) - logits[r, labels[r]]."""
    x = _rows(inputs["logits"], int(inputs["classes"]))
    m = x.max(axis=1)
    lse = np.log(np.exp(x - m[:, None]).sum(axis=1)) + m
    picked = x[np.arange(x.shape[0]), inputs["labels"][: x.shape[0]].astype(np.int64)]
    return {"loss": _f32(lse - picked)}


@_reference
def batchnorm_infer(inputs: Inputs, spec) -> Inputs:
    """Inference batch norm over NCHW with given per-channel mean and var."""
    channels, hw = int(inputs["channels"]), int(inputs["hw"])
    x = _f64(inputs["x"][: int(inputs["n"])]).reshape(-1, channels, hw)
    per_channel = {name: _f64(inputs[name])[None, :, None] for name in ("mean", "var", "gamma", "beta")}
    scale = per_channel["gamma"] / np.sqrt(per_channel["var"] + float(inputs["eps"]))
    return {"y": _f32((x - per_channel["mean"]) * scale + per_channel["beta"])}


@_reference
def transpose(inputs: Inputs, spec) -> Inputs:
    """out[cols x rows] = inp[rows x cols]^T."""
    rows, cols = int(inputs["rows"]), int(inputs["cols"])
    return {"out": _f32(inputs["inp"].reshape(rows, cols).T)}


def run_reference(spec, inputs: Inputs) -> Inputs:
    """Call the spec's reference on `inputs`; KeyError if the spec names none. A bf16 or
    fp8 buffer reaches the reference as float32 values and comes back as its bits (a
    reference computes in float; ``harness.dtypes.encodings``)."""
    from harness.dtypes import encodings

    if spec.reference is None:
        raise KeyError(f"spec {spec.name} names no reference")
    kinds = {p.name: encodings.of(p.dtype) for p in spec.buffers()}
    given = {k: kinds[k].to_float(v) if kinds.get(k) else v for k, v in inputs.items()}
    raw = REFERENCES[spec.reference](given, spec)
    return {k: kinds[k].from_float(v) if kinds.get(k) else v for k, v in raw.items()}
