"""Every gene on nvcc kernels written to be unlike the suite's (tests/data/unseen/wild:
2-D blocks, grid-stride loops, atomics, warp shuffles, dynamic shared memory, f16/bf16 in
inline-asm scopes, doubles, 64-bit indices, early exits, a runtime loop, libdevice math with short branches, scoped register declarations): a no-op or PTX
that ptxas assembles; the launch genes reach what they can prove and say why elsewhere."""

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

WILD = Path(__file__).parent / "data" / "unseen" / "wild" / "wild.ptx"
ENTRIES = re.findall(r"^\.visible \.entry (\w+)\(", WILD.read_text(), re.M)


@pytest.fixture(scope="module")
def module():
    return ptx.parse(WILD.read_text(), str(WILD))


def _launch(entry: str) -> Launch:
    if entry == "add2d":
        return Launch((64, 64, 1), (16, 16, 1), entry)
    return Launch((4096, 1, 1), (256, 1, 1), entry)


@needs_ptxas
@pytest.mark.parametrize("entry", ENTRIES)
def test_every_gene_is_a_no_op_or_assembles(module, entry):
    launch = _launch(entry)
    variants, labels = [], []
    for gene in gene_alphabet():
        applied = apply_genome(module, Genome((gene,)), launch)
        outcome = applied.outcomes[0]
        assert outcome.status in ("applied", "no-op"), (gene, outcome.detail)
        if outcome.status == "applied":
            variants.append(applied.ptx)
            labels.append(str(gene))
    rng = random.Random(entry)
    for _ in range(8):
        genome = random_genome(rng, 2, 5)
        applied = apply_genome(module, genome, launch)
        assert all(o.status != "error" for o in applied.outcomes), str(genome)
        variants.append(applied.ptx)
        labels.append(str(genome))
    failures = [f"{label}: {r.error}" for label, r in zip(labels, compile_many(variants))
                if not r.ok]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("entry, vector", [("half_axpy", "ld.global.v4.u16"),
                                           ("bf16_gelu_tanh", "ld.global.v4.u16"),
                                           ("copy_i64", "ld.global.v4.f32"),
                                           ("daxpy", "ld.global.v2.f64"),
                                           ("rsqrt_norm4", "ld.global.v4.f32"),
                                           ("gelu_erf", "ld.global.v4.f32"),
                                           ("log_abs1", "ld.global.v4.f32"),
                                           ("softplus", "ld.global.v4.f32"),
                                           ("softplus_div", "ld.global.v4.f32"),
                                           ("clamp_or_zero", "ld.global.v4.f32"),
                                           ("split_sign", "ld.global.v4.f32"),
                                           ("exp_f64", "ld.global.v2.f64")])
def test_coarsen_reaches_f16_scopes_64_bit_indices_wide_types_and_short_branches(module, entry, vector):
    applied = apply_genome(module, parse_inline("coarsen(k=4)"), _launch(entry))
    assert applied.outcomes[0].status == "applied", applied.outcomes[0].detail
    text = applied.ptx[applied.ptx.index(f".entry {entry}("):]
    assert vector in text[:text.index("\n}")]
    assert applied.launch.grid == (1024, 1, 1)
    assert not _read_before_written(ptx.parse(applied.ptx), entry)


def _read_before_written(module, entry: str) -> list[str]:
    """Registers an instruction reads before any line above it writes them: in code
    without loops (what coarsen makes), a sign of lines put in the wrong place."""
    fn = next(f for f in module.functions if f.name == entry)
    written, early = set(), []
    for line in fn.body:
        if isinstance(line.stmt, ptx.Instruction):
            early += [r for r in line.stmt.uses() if r.startswith("%") and r not in written
                      and not r.startswith(("%tid", "%ntid", "%ctaid", "%nctaid"))]
            written.update(line.stmt.defs())
    return early


@pytest.mark.parametrize("entry, why", [
    ("stencil3_smem", "shared memory"), ("add2d", "not one-dimensional"),
    ("scale_grid_stride", "%nctaid.x"), ("warp_sum_atomic", "shfl"),
    ("block_sum_dyn", "shared memory"), ("matvec_rows", "straight-line"), ("sin_of", "straight-line"),
    ("pow_15", "straight-line")])
def test_shapes_coarsen_cannot_prove_are_no_ops_that_say_why(module, entry, why):
    outcome = apply_genome(module, parse_inline("coarsen(k=4)"), _launch(entry)).outcomes[0]
    assert outcome.status == "no-op" and why in outcome.detail, outcome
