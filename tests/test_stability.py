"""harness.gpu.stability (`evo stability`) on the CPU: fake workers stand in for GPU workers,
reading a figure that depends on the arena they were given, as placement does on a GPU."""

from __future__ import annotations

import itertools

import pytest

from genomes.genome import parse_inline
from harness.record import Measurement
from harness.gpu.stability import format_report, measure_stability
from harness.kernels.suite import find_kernel

PIDS = itertools.count(100)


class FakeWorker:
    """Reads 1000 cycles in the keeper's arena; in an own arena, wherever it landed."""

    def __init__(self, device, keep_arena):
        self.keep, self.pid = keep_arena, next(PIDS)
        self.requests = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def measure(self, request):
        self.requests.append(request)
        cycles = 1000.0 if self.keep else 1000.0 + 10 * (self.pid % 3)
        return Measurement(kernel=request.name, device="Fake", valid=True, cycles=cycles,
                           timer="clock64", n=32,
                           notes={"worker_pid": self.pid, "robust_std": 3.0,
                                  "after_upload_median": 1200.0,
                                  "placement": "keeper" if self.keep else "own"})


def test_spread_across_fresh_workers_is_reported():
    spec = find_kernel("gemm_tile_2x2x2")
    kept = measure_stability(spec, parse_inline("vec_ld"), workers=3, repeats=2,
                             worker_factory=FakeWorker)
    assert len(kept.workers) == 3 and all(len(ms) == 2 for ms in kept.workers)
    assert kept.spread_across_workers() == 0 and kept.spread_within_workers() == 0
    own = measure_stability(spec, parse_inline("vec_ld"), workers=3, repeats=1,
                            keep_arena=False, worker_factory=FakeWorker)
    assert own.spread_across_workers() == pytest.approx(1020 / 1000 - 1)
    text = format_report(own)
    assert "an arena of its own" in text and "spread across workers: 2.00 %" in text
    assert "robust std 0.30 %" in text and "first launch after upload 1200" in text


def test_the_request_carries_the_variant_and_its_clock_twin():
    seen = []

    def factory(device, keep):
        worker = FakeWorker(device, keep)
        seen.append(worker)
        return worker

    spec = find_kernel("gemm_tile_2x2x2")
    measure_stability(spec, parse_inline("vec_ld,vec_st"), workers=2, repeats=1,
                      worker_factory=factory)
    first, second = (w.requests[0] for w in seen)
    assert first.cubin[:4] == b"\x7fELF" and first.clock_cubin[:4] == b"\x7fELF"
    assert first.cubin != first.baseline_cubin  # the genome was applied
    assert (first.check_seeds, first.timing_seed) == (second.check_seeds, second.timing_seed)


def test_cli_without_a_gpu_is_one_line(capsys):
    from evo.cli import main
    from evo.exit_codes import FAILURE

    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("CuPy is installed: this checks the path without one")
    # no GPU is a runtime failure, not a usage error
    assert main(["stability", "gemm_tile_2x2x2", "--workers", "1", "--repeats", "1"]) == FAILURE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "could not start" in err[0]


def test_the_gpu_clocks_after_each_measurement_are_in_the_report():
    from harness.gpu.clocks import GpuClocks

    reads = []

    def reader(device):
        reads.append(device)
        return GpuClocks(1980.0, 2619.0 if len(reads) == 1 else 1593.0, "P0", 120.0, 41.0)

    spec = find_kernel("gemm_tile_2x2x2")
    report = measure_stability(spec, parse_inline("vec_ld"), workers=1, repeats=2, device=0,
                               worker_factory=FakeWorker, clock_reader=reader)
    assert reads == [0, 0]  # once after each measurement
    text = format_report(report)
    assert "SM 1980 MHz, memory 2619 MHz, P0, 120 W, 41 C" in text
    assert "memory 1593 MHz" in text
