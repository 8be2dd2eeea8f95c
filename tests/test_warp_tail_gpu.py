"""warp_tail on a real GPU: the tree reductions it rewrites (the suite's and nvcc output of
reductions written in other styles) pass the correctness gate, and the figures are printed.

Run with ``python3 -m pytest -m gpu -x -q`` on a machine with an NVIDIA GPU and CuPy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from genomes.genome import Genome, parse_inline
from harness.kernels.spec import load_spec
from harness.kernels.suite import find_kernel

from conftest import gpu_evaluator

pytestmark = pytest.mark.gpu

TREES = Path(__file__).parent / "data" / "unseen" / "trees"
KERNELS = ["reduce_sum", "reduce_max", str(TREES / "sum_sq_128.toml"),
           str(TREES / "argmin_blocks.toml")]


@pytest.fixture(scope="module")
def evaluator():
    with gpu_evaluator(seed=11, store=False) as evaluator:
        yield evaluator


@pytest.mark.parametrize("name", KERNELS, ids=lambda n: Path(n).stem)
def test_warp_tail_passes_the_gate(evaluator, name):
    spec = load_spec(name) if name.endswith(".toml") else find_kernel(name)
    base, tail = evaluator.evaluate(spec, [Genome(), parse_inline("warp_tail")])
    assert base.valid, base.reason
    assert [g["status"] for g in tail.notes["genes"]] == ["applied"]
    assert tail.valid, tail.reason
    print(f"{spec.name} warp_tail: {base.cycles:.0f} -> {tail.cycles:.0f} cycles "
          f"({base.cycles / tail.cycles:.2f}x)")
