"""Launch genes on a real GPU: coarsened, re-blocked and re-threaded variants pass the
correctness gate (suite kernels and kernels the genes were not written for), a launch that misses
elements is rejected, and coarsening relu makes it faster.

Run with ``python3 -m pytest -m gpu -x -q`` on a machine with an NVIDIA GPU and CuPy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from genomes.genome import Genome, parse_inline
from genomes.launch import Launch
from harness import record
from harness.compile import compile_ptx
from harness.kernels.spec import load_spec
from harness.kernels.suite import find_kernel
from harness.gpu.worker import GpuWorker, MeasureRequest

from conftest import gpu_evaluator

pytestmark = pytest.mark.gpu

UNSEEN = Path(__file__).parent / "data" / "unseen"
KERNELS = ["relu", "gelu", "saxpy", "batchnorm_infer", "embedding_gather",
           *(str(p) for p in sorted(UNSEEN.glob("*.toml"))),
           *(str(p) for p in sorted(UNSEEN.glob("wild/*.toml"))),  # f16 scopes, 64-bit index
           *(str(p) for p in sorted(UNSEEN.glob("probe/*.toml")))]  # int8 data: v4.u8
GENOMES = ["coarsen(k=4)", "coarsen(k=2)", "coarsen(k=8)", "coarsen(k=4,form=strided)",
           "coarsen(k=8,form=strided)", "block(threads=128)", "block(threads=1024)",
           "coarsen(k=4),block(threads=512)", "threads(threads=128)", "threads(threads=64)"]


def _spec(name: str):
    return load_spec(name) if name.endswith(".toml") else find_kernel(name)


@pytest.fixture(scope="module")
def evaluator():
    with gpu_evaluator(seed=7, store=False) as evaluator:
        yield evaluator


@pytest.mark.parametrize("name", KERNELS, ids=lambda n: Path(n).stem)
def test_launch_variants_pass_the_gate(evaluator, name):
    spec = _spec(name)
    genomes = [Genome()] + [parse_inline(g) for g in GENOMES]
    results = evaluator.evaluate(spec, genomes)
    base = results[0]
    assert base.valid, base.reason
    lines = []
    for genome, m in zip(GENOMES, results[1:]):
        applied = [g for g in m.notes["genes"] if g["status"] == "applied"]
        if not applied:
            continue
        assert m.valid, f"{spec.name} {genome}: {m.reason}"
        assert "launch" in m.notes
        lines.append(f"{genome}: {base.cycles:.0f} -> {m.cycles:.0f} cycles")
    assert lines, f"no launch gene applied to {spec.name}"
    print(spec.name, "; ".join(lines))


def test_a_launch_that_misses_elements_is_rejected():
    """The gate judges the variant's launch: half the grid leaves half of y unwritten."""
    spec = find_kernel("relu")
    cubin = compile_ptx(spec.ptx_text()).cubin
    half = Launch((spec.grid[0] // 2, 1, 1), spec.block, spec.entry)
    with GpuWorker(0) as worker:
        m = worker.measure(MeasureRequest(spec=spec, cubin=cubin, baseline_cubin=cubin,
                                          check_seeds=(1, 2, 3, 4, 5), timing_seed=9,
                                          launch=half))
    assert not m.valid and m.reason.startswith(record.UNWRITTEN), m.reason


def test_coarsened_relu_is_faster(evaluator):
    spec = find_kernel("relu")
    base, coarse = evaluator.evaluate(spec, [Genome(), parse_inline("coarsen(k=4)")])
    assert base.valid and coarse.valid, coarse.reason
    assert coarse.cycles < 0.95 * base.cycles, (base.cycles, coarse.cycles)


@pytest.mark.parametrize("name,genomes", [
    ("softmax", ["threads(threads=128)", "threads(threads=64)"]),
    ("layernorm", ["threads(threads=128)", "threads(threads=64)"]),
    ("cross_entropy", ["threads(threads=128)"])])
def test_threads_variants_of_block_size_general_kernels_pass_the_gate(evaluator, name, genomes):
    """threads(n) is checked by the gate, not by construction: these kernels split their
    rows by blockDim and reduce over blockDim/32 warps, so they must pass."""
    spec = find_kernel(name)
    results = evaluator.evaluate(spec, [Genome()] + [parse_inline(g) for g in genomes])
    assert results[0].valid, results[0].reason
    for genome, m in zip(genomes, results[1:]):
        assert m.valid, f"{name} {genome}: {m.reason}"
        print(f"{name} {genome}: {results[0].cycles:.0f} -> {m.cycles:.0f} cycles")


def test_threads_on_a_kernel_that_is_not_general_in_blockdim_is_rejected(evaluator):
    """attention reads blockDim but its head dimension is tied to its 128 threads: with 64
    the PTX checks pass and the gate must (and on the H100 did) reject the variant."""
    spec = find_kernel("attention")
    base, m = evaluator.evaluate(spec, [Genome(), parse_inline("threads(threads=64)")])
    assert base.valid, base.reason
    assert m.notes["genes"][0]["status"] == "applied"
    assert not m.valid and m.reason.startswith(record.WRONG), m.reason
