"""Every gene on Triton kernels that are not in the suite, in the PTX Triton emits (target
sm_90a, .loc lines, scratch params; tests/data/unseen/triton, made by its kernels.py):
a no-op or PTX that ptxas assembles for the PTX's own target."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from conftest import needs_ptxas
from genomes import ptx
from genomes.genome import Genome, apply_genome
from genomes.launch import Launch
from genomes.variation import gene_alphabet, random_genome
from harness.compile import compile_many

TRITON = sorted((Path(__file__).parent / "data" / "unseen" / "triton").glob("*.ptx"))


@needs_ptxas
@pytest.mark.parametrize("path", TRITON, ids=lambda p: p.stem)
def test_every_gene_is_a_no_op_or_assembles_for_sm_90a(path):
    module = ptx.parse(path.read_text(), str(path))
    launch = Launch((1024, 1, 1), (128, 1, 1), path.stem)
    variants, labels = [], []
    for gene in gene_alphabet():
        applied = apply_genome(module, Genome((gene,)), launch)
        outcome = applied.outcomes[0]
        assert outcome.status in ("applied", "no-op"), (gene, outcome.detail)
        if gene.transform in ("coarsen", "block"):  # Triton fixes its block size
            assert outcome.status == "no-op" and ".reqntid" in outcome.detail
        if outcome.status == "applied":
            variants.append(applied.ptx)
            labels.append(str(gene))
    rng = random.Random(path.stem)
    for _ in range(10):
        variants.append(apply_genome(module, random_genome(rng, 2, 5), launch).ptx)
        labels.append("random genome")
    results = compile_many(variants)
    assert all(r.arch == "sm_90a" for r in results)
    failures = [f"{label}: {r.error}" for label, r in zip(labels, results) if not r.ok]
    assert len(variants) > 40 and not failures, "\n".join(failures)


@pytest.mark.parametrize("path", TRITON, ids=lambda p: p.stem)
def test_the_specs_match_the_ptx_triton_emitted(path):
    from harness.kernels.suite import find_kernel

    spec = find_kernel(path.with_suffix(".toml"))  # checks the params against the PTX
    assert spec.entry == path.stem and spec.block == (128, 1, 1)
    assert [p.name for p in spec.params][-2:] == ["global_scratch", "profile_scratch"]


def test_a_spec_without_the_dynamic_shared_memory_its_ptx_uses_is_refused(tmp_path):
    import shutil

    from harness.kernels.spec import SpecError
    from harness.kernels.suite import find_kernel

    src = TRITON[0].parent
    shutil.copy(src / "rms_norm.ptx", tmp_path / "rms_norm.ptx")
    text = (src / "rms_norm.toml").read_text()
    assert "shared_mem = 16" in text
    (tmp_path / "rms_norm.toml").write_text(text.replace("shared_mem = 16", "shared_mem = 0"))
    with pytest.raises(SpecError, match=r"dynamic shared memory \(\.extern \.shared global_smem"):
        find_kernel(tmp_path / "rms_norm.toml")
