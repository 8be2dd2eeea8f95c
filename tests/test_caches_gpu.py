"""Timing with warm and cold caches, the copy roofline in the notes, a peer timed on the
same inputs, and a fast-math variant outside the spec's tolerance, on a real GPU.

Run with ``python3 -m pytest -m gpu -x -q`` on a machine with an NVIDIA GPU and CuPy.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from genomes.genome import Genome, parse_inline
from harness import record
from harness.kernels.spec import Tolerance, with_caches
from harness.kernels.suite import find_kernel

from conftest import gpu_evaluator

pytestmark = pytest.mark.gpu

TRITON = Path(__file__).parent / "data" / "unseen" / "triton"


@pytest.fixture(scope="module")
def evaluator():
    with gpu_evaluator(seed=7) as evaluator:
        yield evaluator


def test_cold_timing_reads_from_dram_and_says_so(evaluator):
    relu = find_kernel("relu")  # 8 MiB of buffers: the L2 holds them when warm
    warm, = evaluator.evaluate(relu, [Genome()])
    cold, = evaluator.evaluate(with_caches(relu, "cold"), [Genome()])
    assert warm.valid and cold.valid, (warm.reason, cold.reason)
    assert warm.notes["caches"].startswith("warm")
    assert cold.notes["caches"].startswith("cold (launches rotate among")
    print(f"\nrelu warm {warm.notes['us_per_launch']:.2f} µs, copy {warm.notes['copy_gbps']} GB/s;"
          f" cold {cold.notes['us_per_launch']:.2f} µs, copy {cold.notes['copy_gbps']} GB/s")
    # From DRAM both the kernel and the copy are slower than from the L2.
    assert cold.notes["us_per_launch"] > warm.notes["us_per_launch"]
    assert cold.notes["copy_gbps"] < warm.notes["copy_gbps"]
    assert warm.notes["bytes_moved"] == relu.bytes_read + relu.bytes_written


def test_cold_clock64_timing_flushes_the_l2(evaluator):
    gemm = find_kernel("gemm_tile_4x4x4")
    warm, = evaluator.evaluate(gemm, [Genome()])
    cold, = evaluator.evaluate(with_caches(gemm, "cold"), [Genome()])
    assert warm.valid and cold.valid, (warm.reason, cold.reason)
    assert cold.notes["caches"].startswith("cold (the L2 flushed")
    print(f"\ngemm_tile_4x4x4 warm {warm.cycles:.0f} cycles, cold {cold.cycles:.0f} cycles")
    assert cold.cycles > warm.cycles  # its loads now miss the L2


def test_a_fast_math_variant_outside_the_tolerance_is_rejected_with_its_error(evaluator):
    # Triton's sigmoid_scale divides with div.rn by 1 + exp(-x); an exact tolerance leaves
    # no room for div.approx. (Not layernorm: it divides by 1024, which div.approx gets exact.)
    spec = find_kernel(TRITON / "sigmoid_scale.toml")
    exact = dataclasses.replace(spec, name="sigmoid_scale_exact", tolerance=Tolerance(0.0, 0.0))
    base, fast = evaluator.evaluate(exact, [Genome(), parse_inline("fast_div")])
    assert base.valid, base.reason
    assert [g["status"] for g in fast.notes["genes"]] == ["applied"]
    assert not fast.valid and fast.reason.startswith(record.WRONG), fast.reason
    assert "max rel error" in fast.reason
    loose, = evaluator.evaluate(spec, [parse_inline("fast_div")])
    print(f"\nexact: {fast.reason}\nspec tolerance (rtol 1e-5): valid={loose.valid}, "
          f"max_rel_err={loose.notes.get('max_rel_err')}, {loose.reason}")
    assert loose.valid  # within rtol 1e-5 of the baseline (its stress inputs included)


def test_the_peer_is_timed_on_the_same_inputs():
    torch = pytest.importorskip("torch")
    from harness.kernels.peers import time_peer

    for caches in ("warm", "cold"):
        row = time_peer(with_caches(find_kernel("relu"), caches), torch)
        print(f"\nrelu peer ({caches}): {row}")
        assert row["peer_agrees"] is True and row["peer_us"] > 0
        assert row["peer_caches"].startswith(caches)
