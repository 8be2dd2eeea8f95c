"""harness.gpu.batch_graphs on a real GPU: a clock64 batch's graph kept from one candidate
to the next times each candidate's own function. Three requests to one worker, each with
fresh seeds as a run's candidates: the tile, the tile spinning 20,000 cycles more before
it returns, the tile again. The second and third are timed from the graphs the first
captured (the notes say so), and read their own figures: the spin ~20,000 cycles slower,
the tile again within 1 % of its first figure."""

from __future__ import annotations

import pytest

from harness.gpu.worker import GpuWorker, MeasureRequest
from harness.gpu.instrument import instrument
from harness.kernels.suite import find_kernel

from test_gpu_harness import cubin
from test_program_gpu import with_spin

pytestmark = pytest.mark.gpu


def request(spec, ptx: str, first_seed: int) -> MeasureRequest:
    base = spec.ptx_text()
    return MeasureRequest(spec=spec, cubin=cubin(ptx), baseline_cubin=cubin(base),
                          clock_cubin=cubin(instrument(ptx, spec.entry)),
                          check_seeds=tuple(range(first_seed, first_seed + 5)),
                          timing_seed=first_seed + 100)


def test_a_kept_batch_graph_times_each_candidates_own_function():
    spec = find_kernel("gemm_tile_4x6x8")
    tile = spec.ptx_text()
    slow = with_spin(tile, 20_000)
    assert slow != tile
    with GpuWorker(0) as worker:
        first, spun, again = (worker.measure(request(spec, ptx, seed))
                              for ptx, seed in ((tile, 11), (slow, 21), (tile, 31)))
    for m in (first, spun, again):
        assert m.valid, m.reason
    assert "2 captured, 0 kept" in first.notes["batches"]
    for m in (spun, again):
        assert "0 captured, 2 kept from an earlier candidate" in m.notes["batches"], m.notes["batches"]
    assert spun.cycles > first.cycles + 15_000, (first.cycles, spun.cycles)
    assert again.cycles == pytest.approx(first.cycles, rel=0.01)
