"""The suite's NumPy references (harness/kernels/reference.py) against computations written
apart from them: scalar Python (math, loops) at sampled positions, and for gelu the exact
erf form, which the tanh approximation must track within 1e-3. A reference returning zeros,
a transposed index or a wrong axis fails here (issue 32: shape-only checks let it pass)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from harness.kernels.reference import random_inputs, run_reference
from harness.kernels.suite import find_kernel

RNG = np.random.default_rng(3)


def _outputs(name: str):
    spec = find_kernel(name)
    inputs = random_inputs(spec, np.random.default_rng(11))
    return spec, inputs, run_reference(spec, inputs)


def _close(got, want, rtol=1e-5, atol=1e-6):
    assert math.isclose(float(got), float(want), rel_tol=rtol, abs_tol=atol), (got, want)


def _sample(n: int, k: int = 12) -> list[int]:
    return sorted({0, n - 1, *RNG.integers(0, n, k).tolist()})


@pytest.mark.parametrize("name, out, scalar", [
    ("relu", "y", lambda i, x: max(float(x["x"][i]), 0.0)),
    ("saxpy", "y", lambda i, x: float(x["a"]) * float(x["x"][i]) + float(x["y"][i])),
    ("triton_add", "z", lambda i, x: float(x["x"][i]) + float(x["y"][i])),
])
def test_elementwise_references(name, out, scalar):
    spec, x, y = _outputs(name)
    for i in _sample(spec.param(out).count):
        _close(y[out][i], scalar(i, x))


def test_gelu_tracks_the_exact_erf_form():
    _, x, y = _outputs("gelu")
    for i in _sample(len(x["x"]), 200):
        v = float(x["x"][i])
        _close(y["y"][i], 0.5 * v * (1 + math.erf(v / math.sqrt(2))), rtol=0, atol=1e-3)


@pytest.mark.parametrize("name, fold", [("reduce_sum", math.fsum), ("reduce_max", max)])
def test_block_reductions(name, fold):
    spec, x, y = _outputs(name)
    per = spec.meta["per_block"]
    for b in _sample(spec.grid[0]):
        _close(y["partial"][b], fold(float(v) for v in x["x"][b * per:(b + 1) * per]), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", ["softmax", "triton_softmax"])
def test_softmax_rows(name):
    _, x, y = _outputs(name)
    cols = int(x["cols"])
    for r in _sample(len(x["x"]) // cols, 4):
        row = [float(v) for v in x["x"][r * cols:(r + 1) * cols]]
        top = max(row)
        total = math.fsum(math.exp(v - top) for v in row)
        for c in _sample(cols, 6):
            _close(y["y"][r * cols + c], math.exp(row[c] - top) / total)


def test_layernorm_rows():
    _, x, y = _outputs("layernorm")
    cols = int(x["cols"])
    for r in _sample(len(x["x"]) // cols, 4):
        row = [float(v) for v in x["x"][r * cols:(r + 1) * cols]]
        mean = math.fsum(row) / cols
        var = math.fsum((v - mean) ** 2 for v in row) / cols
        for c in _sample(cols, 6):
            want = (row[c] - mean) / math.sqrt(var + float(x["eps"])) * float(x["gamma"][c]) + float(x["beta"][c])
            _close(y["y"][r * cols + c], want, atol=1e-5)


def test_scan_restarts_every_block():
    spec, x, y = _outputs("scan_inclusive")
    seg = spec.block[0]
    for b in _sample(len(x["x"]) // seg, 3):
        want = list(itertools.accumulate(float(v) for v in x["x"][b * seg:(b + 1) * seg]))
        for i in _sample(seg, 6):
            _close(y["y"][b * seg + i], want[i], atol=1e-4)


def test_attention_rows():
    spec, x, y = _outputs("attention")
    heads, seq, d = spec.meta["heads"], spec.meta["seq"], spec.meta["head_dim"]
    at = lambda t, h, s, j: float(x[t][(h * seq + s) * d + j])
    for h, q in [(0, 0), (heads - 1, seq - 1), (3, 17)]:
        scores = [float(x["scale"]) * math.fsum(at("Q", h, q, j) * at("K", h, k, j) for j in range(d))
                  for k in range(seq)]
        top = max(scores)
        w = [math.exp(s - top) for s in scores]
        total = math.fsum(w)
        for j in (0, d - 1):
            _close(y["O"][(h * seq + q) * d + j],
                   math.fsum(w[k] * at("V", h, k, j) for k in range(seq)) / total, atol=1e-5)


def test_gather_cross_entropy_batchnorm_transpose():
    _, x, y = _outputs("embedding_gather")
    dim = int(x["dim"])
    for t in _sample(int(x["n_tokens"])):
        row = int(x["idx"][t])
        assert np.array_equal(y["out"][t * dim:(t + 1) * dim], x["table"][row * dim:(row + 1) * dim])
    _, x, y = _outputs("cross_entropy")
    classes = int(x["classes"])
    for r in _sample(len(x["labels"]), 4):
        row = [float(v) for v in x["logits"][r * classes:(r + 1) * classes]]
        top = max(row)
        lse = math.log(math.fsum(math.exp(v - top) for v in row)) + top
        _close(y["loss"][r], lse - row[int(x["labels"][r])], atol=1e-5)
    _, x, y = _outputs("batchnorm_infer")
    channels, hw = int(x["channels"]), int(x["hw"])
    for i in _sample(int(x["n"])):
        c = (i // hw) % channels
        want = ((float(x["x"][i]) - float(x["mean"][c])) / math.sqrt(float(x["var"][c]) + float(x["eps"]))
                * float(x["gamma"][c]) + float(x["beta"][c]))
        _close(y["y"][i], want, atol=1e-5)
    _, x, y = _outputs("transpose")
    rows, cols = int(x["rows"]), int(x["cols"])
    for r, c in [(0, 0), (rows - 1, cols - 1), (3, 700), (400, 5)]:
        assert y["out"][c * rows + r] == x["inp"][r * cols + c]
