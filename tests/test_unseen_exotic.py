"""Every gene on nvcc kernels of constructs the other unseen sets lack
(tests/data/unseen/exotic: wmma tensor cores, cp.async pipelines, an out-of-line device
function over a run-time-indexed local array, an atomicCAS loop, inline PTX with a warp
vote, a cooperative-groups tile reduction, printf): a no-op or PTX that ptxas assembles;
a register budget below what ptxas needs for an instruction (wmma) is its clean refusal."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from conftest import needs_ptxas
from genomes.genome import Genome, apply_genome
from genomes.launch import Launch
from genomes.variation import gene_alphabet, random_genome
from harness.compile import compile_many

EXOTIC = Path(__file__).parent / "data" / "unseen" / "exotic" / "exotic.ptx"
ENTRIES = re.findall(r"^\.visible \.entry (\w+)\(", EXOTIC.read_text(), re.M)


def test_the_set_has_the_constructs_it_was_written_with():
    text = EXOTIC.read_text()
    assert len(ENTRIES) == 7
    for construct in ("wmma.mma.sync", "cp.async", "call.uni", "atom.global.cas", "popc.b32",
                      "vote.sync", "vprintf", ".local"):
        assert construct in text, construct


@needs_ptxas
@pytest.mark.parametrize("entry", ENTRIES)
def test_every_gene_is_a_no_op_or_assembles(entry):
    text = EXOTIC.read_text()
    launch = Launch((64, 1, 1), (256, 1, 1), entry)
    first: dict = {}
    for gene in gene_alphabet():
        first.setdefault(gene.transform, gene)
    variants, labels = [], []
    for gene in first.values():
        applied = apply_genome(text, Genome((gene,)), launch)
        outcome = applied.outcomes[0]
        assert outcome.status in ("applied", "no-op"), (gene, outcome.detail)
        if outcome.status == "applied":
            variants.append(applied.ptx)
            labels.append(str(gene))
    rng = random.Random(entry)
    for _ in range(4):
        variants.append(apply_genome(text, random_genome(rng, 2, 6), launch).ptx)
        labels.append("random genome")
    results = compile_many(variants)
    failures = [f"{label}: {r.error}" for label, r in zip(labels, results)
                if not r.ok and "Insufficient registers" not in r.error]
    assert len(variants) > 10 and not failures, "\n".join(failures)
