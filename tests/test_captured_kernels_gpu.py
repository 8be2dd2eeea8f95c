"""Kernels captured from programs evo had not seen (tests/data/captured) measured on a
GPU: a max-autotune GEMM template (cp.async into 160 KiB of dynamic shared memory, wgmma,
bf16; it failed to launch before the worker allowed more than 48 KiB of dynamic shared
memory) and an embedding backward adding floats atomically (its baseline failed as
"output not written" before its gradient was inout): each baseline passes the gate
against itself, each transform's first gene is a correct variant or rejected with a
reason, never a harness error; the atomic kernel's variant passes the finalist check.

Run with ``python3 -m pytest -m gpu -x -q tests/test_captured_kernels_gpu.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.search import applicable_genes
from genomes import transforms
from genomes.genome import Genome
from harness.kernels.suite import find_kernel

from conftest import gpu_evaluator

pytestmark = pytest.mark.gpu

CAPTURED = Path(__file__).parent / "data" / "captured"


@pytest.mark.parametrize("name", ["addmm_gelu", "embedding_backward", "cat_transpose",
                                  "rotary_llama", "rotary_llama_x2"])
def test_a_captured_kernel_and_each_transform_measured(name):
    spec = find_kernel(CAPTURED / f"{name}.toml")
    first = {}
    for gene in applicable_genes(spec.ptx_text(), spec.launch):
        first.setdefault(gene.transform, gene)
    genes = list(first.values())
    with gpu_evaluator(seed=5) as evaluator:
        results = evaluator.evaluate(spec, [Genome()] + [Genome((g,)) for g in genes])
    base, variants = results[0], results[1:]
    assert base.valid, base.reason
    assert not any(m.reason.startswith("worker error") for m in variants)
    rejected = {str(g): m.reason for g, m in zip(genes, variants) if not m.valid}
    print(f"\n{name}: baseline {base.cycles:.0f} cycles; "
          + ", ".join(f"{g} {base.cycles / m.cycles:.3f}x" for g, m in zip(genes, variants) if m.valid)
          + f"; rejected: {rejected}")
    broken = {str(g): m.reason for g, m in zip(genes, variants) if not m.valid
              and not transforms.get(g.transform).changes_results and "ptxas" not in m.reason}
    assert not broken, broken
    want = {"cat_transpose": "vec_ld_index",  # its 2-byte loads merged
            "rotary_llama": "fast_sincos", "rotary_llama_x2": "fast_sincos"}.get(name)  # within bf16's rounding of libdevice's
    if want:
        assert any(g.transform == want and m.valid for g, m in zip(genes, variants)), rejected


@pytest.mark.parametrize("name, genomes", [
    ("rotary_llama_x2", ["fast_sincos,coarsen_tile(k=2)", "fast_sincos,coarsen_tile(k=4)",
                         "fast_sincos,coarsen_tile(k=8)"]),
    ("rotary_llama", ["fast_sincos,addr_rebase", "fast_sincos,coarsen_tile(k=2)",
                      "fast_sincos,coarsen_repeat(k=4)", "fast_sincos,coarsen_repeat(k=2)"]),
    ("cat_transpose", ["coarsen_tile(k=2)", "addr_rebase,vec_ld_index"])])
def test_coarsened_and_rebased_triton_kernels_pass_the_gate(name, genomes):
    """Each thread doing 2-8 threads' work, accesses merged, rebased or shared (the rotary
    kernel's repeated key heads) by launch-wide proofs: the gate's fresh inputs agree with
    the baseline (within bf16's rounding of
    libdevice's sin/cos where fast_sincos is in)."""
    from genomes.genome import parse_inline

    spec = find_kernel(CAPTURED / f"{name}.toml")
    with gpu_evaluator(seed=7) as evaluator:
        results = evaluator.evaluate(spec, [Genome()] + [parse_inline(g) for g in genomes])
    base = results[0]
    assert base.valid, base.reason
    print(f"\n{name}: " + ", ".join(f"{g} {base.cycles / m.cycles:.3f}x" if m.valid else
                                    f"{g} rejected: {m.reason}"
                                    for g, m in zip(genomes, results[1:])))
    for g, m in zip(genomes, results[1:]):
        assert m.valid, f"{g}: {m.reason}"
        assert all(o["status"] == "applied" for o in m.notes["genes"][-1:]), m.notes["genes"]


def test_repeat_kv_fused_into_a_rotary_embedding_by_nvcc_passes_the_gate_coarsened():
    """The CUDA C repeat of tests/data/unseen/repeat (nvcc's PTX), each thread doing the
    work of threads 1-4 heads apart that read the same key element: the gate's fresh
    inputs agree with the baseline."""
    from genomes.genome import parse_inline

    spec = find_kernel(Path(__file__).parent / "data" / "unseen" / "repeat" /
                       "repeat_kv_rope.toml")
    genomes = ["coarsen_repeat(k=4)", "coarsen_repeat(k=2)", "coarsen_tile(k=4)"]
    with gpu_evaluator(seed=7) as evaluator:
        results = evaluator.evaluate(spec, [Genome()] + [parse_inline(g) for g in genomes])
    assert results[0].valid, results[0].reason
    print("\nrepeat_kv_rope: " + ", ".join(
        f"{g} {results[0].cycles / m.cycles:.3f}x" if m.valid else f"{g} rejected: {m.reason}"
        for g, m in zip(genomes, results[1:])))
    for g, m in zip(genomes, results[1:]):
        assert m.valid, f"{g}: {m.reason}"


def test_a_variant_of_a_kernel_adding_floats_atomically_passes_the_finalist_check():
    """Its two determinism runs differ in the last bits, as its baseline's do: judged
    within the tolerance, not bit for bit."""
    from genomes.genome import apply_genome, parse_inline
    from harness.gpu.finalist import check_finalist

    spec = find_kernel(CAPTURED / "embedding_backward.toml")
    result = check_finalist(spec, apply_genome(spec.ptx_text(), parse_inline("maxnreg(n=128)")).ptx)
    assert result.ok or not result.ran, result.reason
    if result.ran:
        assert "within the tolerance" in result.details["determinism"], result.details
