"""Every gene on nvcc kernels of constructs the other unseen sets lack
(tests/data/unseen/exotic: wmma tensor cores, cp.async pipelines, an out-of-line device
function over a run-time-indexed local array, an atomicCAS loop, inline PTX with a warp
vote, a cooperative-groups tile reduction, printf): a no-op or PTX that ptxas assembles;
a register budget below what ptxas needs for an instruction (wmma) is its clean refusal."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import first_genes_assembled, needs_ptxas
from genomes.launch import Launch

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
    results, failures = first_genes_assembled(text, launch, entry, randoms=4, longest=6)
    assert len(results) > 10 and not failures, "\n".join(failures)
