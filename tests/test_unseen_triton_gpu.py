"""Triton kernels outside the suite, PTX as Triton emits it (sm_90a, .reqntid, two scratch
params), measured end to end on a GPU: the baseline passes the gate against itself, and
each transform that changes the kernel (its first parameter value) is either a correct variant or rejected with a reason
(never a harness error).

Run with ``python3 -m pytest -m gpu -x -q`` on a machine with an NVIDIA GPU and CuPy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.search import applicable_genes
from genomes import transforms
from genomes.genome import Genome
from harness.compile import target_arch
from harness.kernels.suite import find_kernel

from conftest import gpu_evaluator

pytestmark = pytest.mark.gpu

TRITON = Path(__file__).parent / "data" / "unseen" / "triton"


@pytest.fixture(scope="module")
def evaluator():
    with gpu_evaluator(seed=3) as evaluator:
        yield evaluator


@pytest.mark.parametrize("name", ["leaky_relu", "sigmoid_scale", "rms_norm"])
def test_triton_kernel_and_every_gene_measured_on_sm_90a(evaluator, name):
    spec = find_kernel(TRITON / f"{name}.toml")
    assert target_arch(spec.ptx_text(), "sm_90") == "sm_90a"
    first = {}  # one gene per transform: enough to reach every kind of edit, and quick
    for gene in applicable_genes(spec.ptx_text(), spec.launch):
        first.setdefault(gene.transform, gene)
    genes = list(first.values())
    results = evaluator.evaluate(spec, [Genome()] + [Genome((g,)) for g in genes])
    base, variants = results[0], results[1:]
    assert base.valid, base.reason
    assert not any(m.reason.startswith("worker error") for m in variants)
    valid = [(m.cycles, str(g)) for g, m in zip(genes, variants) if m.valid]
    rejected = {str(g): m.reason for g, m in zip(genes, variants) if not m.valid}
    best = min(valid)
    print(f"\n{name}: baseline {base.cycles:.0f} cycles; {len(valid)} of {len(genes)} genes "
          f"valid, best {best[1]} {best[0]:.0f} ({base.cycles / best[0]:.2f}x); rejected: "
          f"{rejected}")
    # a gene that leaves results bit for bit (no fast math) must keep the kernel correct:
    # where one does not, the transform broke it (ptxas refusing a budget is no such break)
    broken = {str(g): m.reason for g, m in zip(genes, variants) if not m.valid
              and not transforms.get(g.transform).changes_results and "ptxas" not in m.reason}
    assert not broken, broken
