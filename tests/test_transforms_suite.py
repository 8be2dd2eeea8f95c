"""Every transform on every suite kernel: no change, or PTX that ptxas assembles.

Also: seeded random genomes never raise; each variant assembles or is a ptxas error result.
"""

from __future__ import annotations

import random

import pytest

from conftest import needs_ptxas, suite_ptx_files
from genomes import ptx
from genomes.genome import Genome, apply_genome
from genomes.variation import gene_alphabet, random_genome
from harness.compile import compile_many

MAXNREG_VALUES = (16, 32, 64, 128, 255)  # the extremes of the range and a few between


@pytest.fixture(scope="module")
def suite() -> dict[str, ptx.Module]:
    return {p.stem: ptx.parse(p.read_text(), str(p)) for p in suite_ptx_files()}


@needs_ptxas
@pytest.mark.parametrize("gene", gene_alphabet(MAXNREG_VALUES), ids=str)
def test_gene_alone_on_every_kernel_is_no_change_or_assembles(gene, suite):
    variants, names = [], []
    for name, module in suite.items():
        applied = apply_genome(module, Genome((gene,)))
        outcome = applied.outcomes[0]
        assert outcome.status in ("applied", "no-op"), f"{name}: {outcome.detail}"
        if outcome.status == "applied":
            assert applied.ptx != module.render()
            variants.append(applied.ptx)
            names.append(name)
        else:
            assert applied.ptx == module.render()
    failures = [f"{n}: {r.error}" for n, r in zip(names, compile_many(variants)) if not r.ok]
    assert not failures, "\n".join(failures)


@needs_ptxas
def test_random_genomes_never_raise(suite):
    rng = random.Random(20261122)
    names = sorted(suite)
    # The large gemm tiles take ~1 s each in ptxas: keep them rare here.
    small = [n for n in names if not n.startswith(("gemm_tile_1",))]
    cases = []
    for _ in range(300):
        name = rng.choice(small)
        genome = random_genome(rng, 1, 6)
        applied = apply_genome(suite[name], genome)
        assert all(o.status != "error" for o in applied.outcomes), (name, str(genome))
        cases.append((name, str(genome), applied.ptx))
    results = compile_many([c[2] for c in cases])
    # Each is a result, never an exception; report any that ptxas rejected.
    rejected = [f"{n} [{g}]: {r.error}" for (n, g, _), r in zip(cases, results) if not r.ok]
    assert all(r.ok or r.error for r in results)
    assert not rejected, "\n".join(rejected[:10])
