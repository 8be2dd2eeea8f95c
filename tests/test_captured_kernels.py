"""Every gene on kernels evo capture wrote from programs it had not seen (tests/data/captured:
a max-autotune GEMM template with cp.async into 160 KiB of dynamic shared memory and
wgmma; an embedding backward adding floats atomically): a no-op or PTX that ptxas
assembles for the PTX's own target; and the worker lets a kernel ask for more than 48 KiB
of dynamic shared memory."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import needs_ptxas
from genomes.genome import Genome, apply_genome
from genomes.variation import gene_alphabet, random_genome
from harness.compile import compile_many
from harness.kernels.suite import find_kernel

CAPTURED = Path(__file__).parent / "data" / "captured"
TEMPLATE = CAPTURED / "addmm_gelu.toml"
WHAT = {"addmm_gelu": ("wgmma", "cp.async"), "embedding_backward": ("atom.global.gpu.relaxed.add.v4.f32",)}


@needs_ptxas
@pytest.mark.parametrize("name", sorted(WHAT))
def test_every_gene_on_a_captured_kernel_is_a_no_op_or_assembles(name):
    spec = find_kernel(CAPTURED / f"{name}.toml")
    text = spec.ptx_text()
    assert all(mark in text for mark in WHAT[name])
    variants, labels = [spec.ptx_text()], ["baseline"]
    first = {}  # one gene per transform: every kind of edit, in a minute of ptxas
    for gene in gene_alphabet():
        first.setdefault(gene.transform, gene)
    for gene in first.values():
        applied = apply_genome(text, Genome((gene,)), spec.launch)
        outcome = applied.outcomes[0]
        assert outcome.status in ("applied", "no-op"), (gene, outcome.detail)
        if outcome.status == "applied":
            variants.append(applied.ptx)
            labels.append(str(gene))
    rng = random.Random(name)
    for _ in range(2):
        variants.append(apply_genome(text, random_genome(rng, 2, 5), spec.launch).ptx)
        labels.append("random genome")
    results = compile_many(variants)
    # a register budget below what wgmma needs is ptxas's clean refusal, as a search meets it
    failures = [f"{label}: {r.error}" for label, r in zip(labels, results)
                if not r.ok and "Insufficient registers" not in r.error]
    assert len(variants) > 10 and not failures, "\n".join(failures)
    assert results[0].ok


def test_a_kernel_asking_for_more_than_48_kib_of_shared_memory_is_allowed_it():
    """Without the function's attribute, such a launch fails with CUDA_ERROR_INVALID_VALUE
    (every GEMM template's baseline did, on an H200)."""
    from harness.gpu.runner import allow_shared

    calls = []
    cp = SimpleNamespace(cuda=SimpleNamespace(driver=SimpleNamespace(
        funcSetAttribute=lambda *a: calls.append(a))))
    fn = SimpleNamespace(ptr=1234)
    assert allow_shared(cp, fn, 48 * 1024) is fn and calls == []
    assert allow_shared(cp, fn, find_kernel(TEMPLATE).shared_mem) is fn
    assert calls == [(1234, 8, 163840)]
