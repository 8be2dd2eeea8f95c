"""The planted bugs of tests/test_gpu_harness.py, built and assembled on the CPU: each
edit is made (not silently a no-op when the PTX it edits changes), says what its name says
in the PTX, and assembles, so that on a GPU the gate, not ptxas, is what rejects it."""

from __future__ import annotations

import re

import pytest

from harness.compile import compile_ptx
from harness.kernels.suite import find_kernel

from conftest import needs_ptxas
from test_gpu_harness import PLANTED

STORE = re.compile(r"^\s*st\.global(?:\.v\d)?\.f32\s", re.MULTILINE)


def _stores(ptx: str) -> int:
    return len(STORE.findall(ptx))


@needs_ptxas
@pytest.mark.parametrize("label, kernel, make_ptx, reason, detail", PLANTED, ids=[p[0] for p in PLANTED])
def test_a_planted_bug_is_made_and_assembles(label, kernel, make_ptx, reason, detail):
    base, ptx = find_kernel(kernel).ptx_text(), make_ptx()
    assert ptx != base, f"{label}: the edit changed nothing"
    compiled = compile_ptx(ptx)
    assert compiled.ok, f"{label}: ptxas refused it: {compiled.error}"
    expected_stores = {"one store dropped": _stores(base) - 1, "all stores dropped": 0,
                       "input clobbered": _stores(base) + 1, "out-of-bounds store": _stores(base) + 1,
                       "illegal address": _stores(base) + 1}
    if label in expected_stores:
        assert _stores(ptx) == expected_stores[label], label
    if label == "misaligned v4 load":
        assert re.search(r"ld\.global\.v4\.f32\s+\{[^}]+\},\s*\[%rd\d+\+4\]", ptx)
    if label == "data race":
        assert "bar.sync" in base and "bar.sync" not in ptx
    if label == "infinite loop":
        assert "bra.uni \t$L__planted_hang" in ptx
    if label == "wrong fma source":
        assert len(re.findall(r"fma\.rn\.f32", ptx)) == len(re.findall(r"fma\.rn\.f32", base))
