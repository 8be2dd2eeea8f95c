"""Every gene on nvcc kernels unlike the other unseen sets (tests/data/unseen/probe: int8,
uint8 and int16 widening, char4/uchar4 and float2/float4 vectors, __restrict__/__ldg, two
outputs of different types, a 4-per-thread unrolled tail, strided/gather/scatter access,
division by a runtime value, select chains, bit intrinsics, fast intrinsics, a 32x33 shared
transpose tile, a switch, a thread-0 exit, a double write, half2 intrinsics, a data-dependent
do-while, bf16 conversion): a no-op or PTX that ptxas assembles, and no applied gene makes a
register read before it is written (in entries without loops) that was not so before."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from conftest import needs_ptxas
from genomes import ptx
from genomes.genome import Genome, apply_genome, parse_inline
from genomes.launch import Launch
from genomes.variation import gene_alphabet, random_genome
from harness.compile import compile_many
from test_unseen_wild import _read_before_written

PROBE = Path(__file__).parent / "data" / "unseen" / "probe" / "probe.ptx"
ENTRIES = re.findall(r"^\.visible \.entry (\w+)\(", PROBE.read_text(), re.M)
TWO_D = {"transpose32": Launch((32, 32, 1), (32, 32, 1), "transpose32")}


@pytest.fixture(scope="module")
def module():
    return ptx.parse(PROBE.read_text(), str(PROBE))


def _launch(entry: str) -> Launch:
    return TWO_D.get(entry) or Launch((4096, 1, 1), (256, 1, 1), entry)


def _has_loop(module, entry: str) -> bool:
    """A branch back to a label above it (where `_read_before_written` would misfire)."""
    fn = next(f for f in module.functions if f.name == entry)
    seen = set()
    for line in fn.body:
        if isinstance(line.stmt, ptx.Label):
            seen.add(line.stmt.name)
        elif isinstance(line.stmt, ptx.Instruction) and line.stmt.op == "bra":
            if line.stmt.operands and line.stmt.operands[-1] in seen:
                return True
    return False


def test_probe_has_the_kernels_it_was_written_with():
    assert len(ENTRIES) >= 20 and "transpose32" in ENTRIES


@needs_ptxas
@pytest.mark.parametrize("entry", ENTRIES)
def test_every_gene_is_a_no_op_or_assembles(module, entry):
    launch = _launch(entry)
    straight = not _has_loop(module, entry)
    before = set(_read_before_written(module, entry))
    rng = random.Random(entry)
    genomes = [Genome((gene,)) for gene in gene_alphabet()]
    genomes += [random_genome(rng, 2, 5) for _ in range(8)]
    variants, labels, errors = [], [], []
    for genome in genomes:
        try:
            applied = apply_genome(module, genome, launch)
        except Exception as err:  # apply_genome catches a transform's failure itself
            errors.append(f"{genome}: raised {type(err).__name__}: {err}")
            continue
        errors += [f"{genome}: {o.gene}: {o.status}: {o.detail}" for o in applied.outcomes
                   if o.status == "error"]
        if not applied.changed:
            continue
        early = set(_read_before_written(ptx.parse(applied.ptx), entry)) - before
        if straight and early:
            errors.append(f"{genome}: reads before written: {sorted(early)[:6]}")
        variants.append(applied.ptx)
        labels.append(str(genome))
    failures = [f"{label}: {r.error}" for label, r in zip(labels, compile_many(variants))
                if not r.ok]
    assert not errors + failures, "\n".join(errors + failures)


@pytest.mark.parametrize("entry, vector", [("u8_to_f32_norm", "ld.global.nc.v4.u8"),
                                           ("i8_widen_sum", "ld.global.v4.s8"),
                                           ("two_outputs", "st.global.v4.u8"),
                                           ("two_outputs", "ld.global.nc.v4.f32"),
                                           ("i16_sat_add", "ld.global.v4.s16")])
def test_coarsened_byte_and_short_accesses_become_vectors(module, entry, vector):
    """Four threads' bytes (int8 data) are one 32-bit access once coarsened: a v4 of u8;
    and ``__ldg(x + i)``, a load from the pointer param with no cvta, a v4 too."""
    applied = apply_genome(module, parse_inline("coarsen(form=contiguous,k=4)"), _launch(entry))
    assert applied.outcomes[0].status == "applied", applied.outcomes[0].detail
    fn = next(f for f in ptx.parse(applied.ptx).functions if f.name == entry)
    assert any(ins.opcode == vector for ins in fn.instructions())
