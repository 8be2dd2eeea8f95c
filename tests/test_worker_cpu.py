"""The GPU worker's process plumbing, on the CPU: a fake child stands in for harness.gpu.runner.serve.

The fakes follow the worker protocol (harness/gpu/worker.py) and act on the request's
``kernel_name``: "hang" sleeps forever, "die" exits mid-request, "sticky" answers like a
child whose CUDA context broke and exits; anything else is measured at once, with the
child's pid in the notes so that a test can tell a restarted child from the old one.
They live at module level because a spawned child imports them by name.
"""

from __future__ import annotations

import os
import pickle
import signal
import time

import numpy as np
import pytest

from harness import record
from harness.record import Measurement
from harness.kernels.suite import find_kernel
from harness.gpu.estimate import central, central_sem, precise_enough, summarize
from harness.gpu.worker import GpuWorker, MeasureRequest, WorkerStartError


def fake_serve(conn, device_id):
    conn.send(("ready", f"Fake GPU {device_id}"))
    while True:
        request = conn.recv()
        if request is None:
            return
        if request.kernel_name == "hang":
            time.sleep(3600)
        if request.kernel_name == "die":
            os._exit(7)
        if request.kernel_name == "slow":
            time.sleep(1.0)
        if request.kernel_name == "sticky":
            bad = Measurement(kernel=request.name, device="Fake", valid=False,
                              reason=f"{record.LAUNCH_ERROR}: cudaErrorIllegalAddress: an illegal memory access")
            conn.send(("result", bad, False))
            os._exit(0)
        good = Measurement(kernel=request.name, device="Fake", valid=True, cycles=100.0, n=30,
                           timer=request.spec.timing, notes={"pid": os.getpid()})
        conn.send(("result", good, True))


def fake_refuses(conn, device_id):
    conn.send(("error", "CUDARuntimeError: cudaErrorNoDevice: no CUDA-capable device is detected"))


def fake_dies_at_start(conn, device_id):
    os._exit(3)


def request(kernel_name: str = "", timeout_s: float = 10.0, kernel: str = "gemm_tile_2x2x2") -> MeasureRequest:
    return MeasureRequest(spec=find_kernel(kernel), cubin=b"variant", baseline_cubin=b"base",
                          clock_cubin=b"clock", check_seeds=(1, 2, 3, 4, 5), timing_seed=99,
                          timeout_s=timeout_s, kernel_name=kernel_name)


def test_request_pickles_with_its_spec():
    req = request("k")
    back = pickle.loads(pickle.dumps(req))
    assert back == req
    assert back.spec.meta["m"] == 2 and type(back.spec.meta) is type(req.spec.meta)


def test_request_needs_five_check_seeds_and_a_separate_timing_seed():
    spec = find_kernel("gemm_tile_2x2x2")
    with pytest.raises(ValueError, match="timing_seed"):
        MeasureRequest(spec=spec, cubin=b"", baseline_cubin=b"", check_seeds=(1, 2, 3, 4, 5), timing_seed=2)
    with pytest.raises(ValueError, match="at least 5 check seeds"):
        MeasureRequest(spec=spec, cubin=b"", baseline_cubin=b"", check_seeds=(1, 2), timing_seed=9)


def test_hang_death_and_sticky_error_each_restart_the_worker():
    with GpuWorker(0, target=fake_serve) as worker:
        assert worker.device_name() == "Fake GPU 0"
        first = worker.measure(request("ok"))
        assert first.valid and first.cycles == 100.0
        pid = first.notes["pid"]

        start = time.perf_counter()
        hung = worker.measure(request("hang", timeout_s=0.5))
        assert not hung.valid and hung.reason.startswith(record.TIMEOUT)
        assert hung.kernel == "hang" and hung.device == "Fake GPU 0" and hung.fitness == float("inf")
        assert time.perf_counter() - start < 5
        after_hang = worker.measure(request("ok"))
        assert after_hang.valid and after_hang.notes["pid"] != pid

        died = worker.measure(request("die"))
        assert not died.valid and died.reason.startswith(record.LAUNCH_ERROR)
        assert "exit code 7" in died.reason
        after_death = worker.measure(request("ok"))
        assert after_death.valid and after_death.notes["pid"] != after_hang.notes["pid"]

        sticky = worker.measure(request("sticky"))
        assert not sticky.valid and "cudaErrorIllegalAddress" in sticky.reason
        after_sticky = worker.measure(request("ok"))
        assert after_sticky.valid and after_sticky.notes["pid"] != after_death.notes["pid"]
        assert worker.restarts == 3


def test_a_childs_first_judgement_of_a_dtype_on_the_gpu_gets_time_to_compile(monkeypatch):
    """CuPy compiles the gate's device kernels on first use (harness.gpu.worker.COLD_GATE_S):
    the first request judged on the GPU per dtype set and child may take that much longer;
    the next one, or a small kernel judged on the host, may not."""
    import harness.gpu.worker

    monkeypatch.setattr(harness.gpu.worker, "COLD_GATE_S", 2.0)
    with GpuWorker(0, target=fake_serve) as worker:
        assert not worker.measure(request("slow", timeout_s=0.5)).valid  # gemm tile: host-judged
        first = worker.measure(request("slow", timeout_s=0.5, kernel="relu"))  # 8 MiB: on the GPU
        assert first.valid, first.reason
        again = worker.measure(request("slow", timeout_s=0.5, kernel="relu"))
        assert not again.valid and "no answer within 0.5 s" in again.reason
        fresh_child = worker.measure(request("slow", timeout_s=0.5, kernel="relu"))
        assert fresh_child.valid, fresh_child.reason  # the timeout restarted the child


def test_a_child_killed_between_requests_is_replaced_without_blaming_the_next_candidate():
    with GpuWorker(0, target=fake_serve) as worker:
        pid = worker.measure(request("ok")).notes["pid"]
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        again = worker.measure(request("ok"))
        assert again.valid and again.notes["pid"] != pid


def test_close_stops_the_child():
    worker = GpuWorker(0, target=fake_serve)
    worker.device_name()
    proc = worker._proc
    worker.close()
    assert not proc.is_alive() and worker.pid is None
    worker.close()  # twice is fine


@pytest.mark.parametrize("target, message", [(fake_refuses, "cudaErrorNoDevice"),
                                             (fake_dies_at_start, "exit code 3")])
def test_a_worker_that_cannot_start_is_one_clear_error(target, message):
    with GpuWorker(0, target=target) as worker, pytest.raises(WorkerStartError, match=message):
        worker.measure(request("ok"))


def test_central_is_a_smoothed_median():
    assert central([3.0, 1.0, 2.0]) == 2.0 and central([1.0, 2.0]) == 1.5
    rng = np.random.default_rng(1)
    steady = np.round(rng.normal(1952.0, 1.5, 200))
    spiky = steady.copy()
    spiky[::40] = 50_000.0  # interrupts: ignored, as by the median
    assert abs(central(spiky) - central(steady)) < 0.5
    # Two modes of equal weight: the plain median sits on one or the other, central between.
    modes = np.concatenate([np.full(100, 1243.0), np.full(100, 1246.0)])
    assert 1243.0 < central(modes) < 1246.0


def test_central_moves_smoothly_with_the_mix_of_batch_states():
    """Each batch (one upload) runs all its launches in one of two states 3 cycles apart,
    as on the H200. central over batches lies between the states, in proportion to
    their mix, where the middle fifth of the samples snapped to one state."""
    rng = np.random.default_rng(2)

    def run(share_high: float) -> list[float]:
        states = np.where(rng.random(40) < share_high, 1338.0, 1335.0)
        return [s + n for s in states for n in rng.choice([-1.0, 0.0, 0.0, 1.0], 8)]

    lows, highs = run(0.35), run(0.65)
    assert 1335.3 < central(lows, batch=8) < central(highs, batch=8) < 1337.7
    assert central(highs, batch=8) - central(lows, batch=8) < 2.4
    # a batch hit by an interrupt does not move it
    spiked = list(lows)
    spiked[8:16] = [50_000.0] * 8
    assert abs(central(spiked, batch=8) - central(lows, batch=8)) < 0.5
    # batches, not launches, are the independent draws: their SEM reflects the state mix
    assert central_sem(lows, batch=8) > central_sem(sorted(lows), batch=1) / 2


def test_central_sem_is_small_for_steady_samples_and_repeatable():
    rng = np.random.default_rng(1)
    steady = np.round(rng.normal(1952.0, 1.5, 200))
    assert central_sem(steady) <= 0.5
    assert central_sem(steady) == central_sem(steady)  # a fixed bootstrap seed
    assert central_sem(rng.normal(1000, 100, 40)) > 5
    assert central_sem([5.0]) == float("inf")


def test_precise_enough_respects_min_and_max_reps():
    steady = [1000.0] * 10
    assert not precise_enough(steady, min_reps=30, max_reps=1000, target_rel_sem=0.005)
    assert precise_enough(steady * 3, min_reps=30, max_reps=1000, target_rel_sem=0.005)
    noisy = list(np.random.default_rng(0).normal(1000, 100, 40))
    assert not precise_enough(noisy, min_reps=30, max_reps=1000, target_rel_sem=0.005)
    assert precise_enough(noisy, min_reps=30, max_reps=40, target_rel_sem=0.005)


def test_summarize():
    stats = summarize(range(1, 101))
    assert stats["median"] == 50.5 and stats["cycles"] == 50.5 and stats["n"] == 100
    assert stats["p10"] == pytest.approx(10.9) and stats["p90"] == pytest.approx(90.1)


SCRIPT_WITHOUT_MAIN_GUARD = """
import sys
sys.path.insert(0, {tests!r})
from test_worker_cpu import fake_serve, request
from harness.gpu.worker import GpuWorker

print("script body ran")
with GpuWorker(0, target=fake_serve) as worker:
    print("measured", worker.measure(request("ok")).valid)
"""


def test_a_script_without_a_main_guard_runs_once_and_its_worker_works(tmp_path):
    """Spawn prepares a child by importing the parent's __main__: a script without an
    ``if __name__ == "__main__":`` guard ran again in each worker (harness.gpu.spawn)."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "plain.py"
    script.write_text(SCRIPT_WITHOUT_MAIN_GUARD.format(tests=str(Path(__file__).parent)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["script body ran", "measured True"], proc.stdout
    assert "bootstrapping" not in proc.stderr
