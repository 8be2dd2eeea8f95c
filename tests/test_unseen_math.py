"""coarsen on libdevice math it was not written for (tests/data/unseen/math: nvcc output of
28 elementwise kernels, f32 and f64, no fast-math): where if-conversion makes the body
straight it applies, and every variant assembles with no register read before it is
written; where it cannot, it is a no-op that says why."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import needs_ptxas
from genomes import ptx
from genomes.genome import apply_genome, parse_inline
from genomes.launch import Launch
from harness.compile import compile_many
from test_unseen_wild import _read_before_written

MATH = Path(__file__).parent / "data" / "unseen" / "math" / "math.ptx"
ENTRIES = re.findall(r"^\.visible \.entry (\w+)\(", MATH.read_text(), re.M)
# slow paths too long to predicate (lgamma's, fmod's loop, double tanh's two polynomials)
STAY_BRANCHY = {"k_lgamma", "k_fmod", "k_double_tanh", "d_ilogb"}
GENOMES = ("coarsen(k=2)", "coarsen(k=4)", "coarsen(k=8)", "coarsen(k=4,form=strided)")


@pytest.fixture(scope="module")
def module():
    return ptx.parse(MATH.read_text(), str(MATH))


@needs_ptxas
def test_coarsen_reaches_most_of_libdevice_and_every_variant_assembles(module):
    variants, labels = [], []
    for entry in ENTRIES:
        launch = Launch((4096, 1, 1), (256, 1, 1), entry)
        for text in GENOMES:
            applied = apply_genome(module, parse_inline(text), launch)
            outcome = applied.outcomes[0]
            if entry in STAY_BRANCHY:
                assert outcome.status == "no-op" and "branch" in outcome.detail, (entry, outcome)
                continue
            assert outcome.status == "applied", (entry, text, outcome.detail)
            assert not _read_before_written(ptx.parse(applied.ptx), entry), (entry, text)
            variants.append(applied.ptx)
            labels.append(f"{entry} {text}")
    assert len(variants) == 4 * (len(ENTRIES) - len(STAY_BRANCHY)) >= 90
    failures = [f"{label}: {r.error}" for label, r in zip(labels, compile_many(variants))
                if not r.ok]
    assert not failures, "\n".join(failures[:5])
