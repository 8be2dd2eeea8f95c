"""Every gene on kernels evo capture wrote from programs it had not seen (tests/data/captured:
a max-autotune GEMM template with cp.async into 160 KiB of dynamic shared memory and
wgmma; an embedding backward adding floats atomically): a no-op or PTX that ptxas
assembles for the PTX's own target; and the worker lets a kernel ask for more than 48 KiB
of dynamic shared memory."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import first_genes_assembled, needs_ptxas
from harness.kernels.suite import find_kernel

CAPTURED = Path(__file__).parent / "data" / "captured"
TEMPLATE = CAPTURED / "addmm_gelu.toml"
WHAT = {"addmm_gelu": ("wgmma", "cp.async"), "embedding_backward": ("atom.global.gpu.relaxed.add.v4.f32",),
        "cat_transpose": ("ld.global.L1::evict_last.L2::cache_hint.b16",),
        "rotary_llama": ("%__nv_cosf.exit", "%__nv_sinf.exit"),
        "rotary_llama_x2": ("%__nv_cosf.exit", "ld.global.b32")}


@needs_ptxas
@pytest.mark.parametrize("name", sorted(WHAT))
def test_every_gene_on_a_captured_kernel_is_a_no_op_or_assembles(name):
    spec = find_kernel(CAPTURED / f"{name}.toml")
    text = spec.ptx_text()
    assert all(mark in text for mark in WHAT[name])
    # one gene per transform: every kind of edit, in a minute of ptxas
    results, failures = first_genes_assembled(text, spec.launch, name, randoms=2, longest=5,
                                              baseline=True)
    assert len(results) > 10 and not failures, "\n".join(failures)
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
