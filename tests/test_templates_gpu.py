"""A kernel of Inductor's max-autotune GEMM templates (tests/data/templates/addmm_gelu:
cp.async into 160 KiB of dynamic shared memory, wgmma, bf16) measured on a GPU: the
baseline passes the gate against itself (it failed to launch before the worker allowed
more than 48 KiB of dynamic shared memory), and each transform's first gene is a correct
variant or rejected with a reason, never a harness error.

Run with ``python3 -m pytest -m gpu -x -q tests/test_templates_gpu.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.search import applicable_genes
from genomes import transforms
from genomes.genome import Genome
from harness.backends.gpu import GpuBackend
from harness.evaluate import Evaluator
from harness.kernels.suite import find_kernel
from harness.store import Store

pytestmark = pytest.mark.gpu

TEMPLATE = Path(__file__).parent / "data" / "templates" / "addmm_gelu.toml"


def test_a_gemm_template_and_each_transform_measured():
    spec = find_kernel(TEMPLATE)
    first = {}
    for gene in applicable_genes(spec.ptx_text(), spec.launch):
        first.setdefault(gene.transform, gene)
    genes = list(first.values())
    backend = GpuBackend([0], seed=5)
    try:
        with Store(":memory:") as store:
            results = Evaluator(backend, store).evaluate(spec, [Genome()] + [Genome((g,)) for g in genes])
    finally:
        backend.close()
    base, variants = results[0], results[1:]
    assert base.valid, base.reason
    assert not any(m.reason.startswith("worker error") for m in variants)
    rejected = {str(g): m.reason for g, m in zip(genes, variants) if not m.valid}
    print(f"\naddmm_gelu: baseline {base.cycles:.0f} cycles; "
          + ", ".join(f"{g} {base.cycles / m.cycles:.3f}x" for g, m in zip(genes, variants) if m.valid)
          + f"; rejected: {rejected}")
    broken = {str(g): m.reason for g, m in zip(genes, variants) if not m.valid
              and not transforms.get(g.transform).changes_results and "ptxas" not in m.reason}
    assert not broken, broken
