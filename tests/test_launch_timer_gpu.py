"""``hook.LaunchTimer`` on the GPU: a launch is timed by the GPU's time alone, however
long the host takes to make it (GPU, torch)."""

from __future__ import annotations

import statistics
import time

import pytest

pytestmark = pytest.mark.gpu


def _timed(timer, host_seconds: float, x, times: int) -> list[float]:
    """µs of ``times`` launches of a tiny kernel, each made ``host_seconds`` after the
    start event (as a slow launcher would)."""
    import torch

    from evo.model.hook import elapsed_us

    def launch():
        time.sleep(host_seconds)
        x.add_(1.0)

    stream = torch.cuda.current_stream().cuda_stream
    out = []
    while len(out) < times:
        _, events = timer.time(stream, launch)
        if events is not None:
            out.append(elapsed_us([events], statistics.median))
    return out


def test_a_launch_is_timed_by_the_gpu_alone_however_slow_the_host():
    torch = pytest.importorskip("torch")
    from evo.model.hook import LaunchTimer

    x = torch.zeros(1024, device="cuda")
    quick = _timed(LaunchTimer(), 0.0, x, 8)
    slow_host = LaunchTimer()
    slow = _timed(slow_host, 0.002, x, 8)  # 2 ms of host work between start and launch
    assert statistics.median(quick) < 30, quick
    assert statistics.median(slow) < 30, slow  # events alone would read >= 2000 us
    assert slow_host.uncovered >= 1 and slow_host.spin > LaunchTimer.SPIN_CYCLES
    torch.cuda.synchronize()
    assert float(x[0]) >= 16  # every launch ran, the uncovered ones too
