"""The arena keeper's lending (harness.gpu.arena) and a worker keeping its arena across restarts,
on the CPU: a fake keeper process hands out made-up handles instead of CUDA IPC handles."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.gpu import arena
from harness.record import Measurement
from harness.kernels.suite import find_kernel
from harness.gpu.worker import GpuWorker, MeasureRequest


def fake_keep(conn, device_id, nbytes):
    conn.send(("ready", None))
    made = 0
    while (message := conn.recv()) is not None:
        assert message == "alloc"
        conn.send(("handle", f"gpu{device_id}-arena{made}-{nbytes}".encode()))
        made += 1


def broken_keep(conn, device_id, nbytes):
    conn.send(("error", "ModuleNotFoundError: No module named 'cupy'"))


def serve_reporting_arena(conn, device_id, arena_handle):
    """A worker child that answers every request with the arena it was given and its pid."""
    conn.send(("ready", "Fake GPU"))
    while (request := conn.recv()) is not None:
        m = Measurement(kernel=request.name, device="Fake GPU", valid=request.kernel_name != "die",
                        notes={"arena": arena_handle, "pid": os.getpid()})
        conn.send(("result", m, m.valid))
        if not m.valid:
            os._exit(0)  # as after a sticky CUDA error: the parent restarts the child


def request(name: str) -> MeasureRequest:
    return MeasureRequest(spec=find_kernel("gemm_tile_2x2x2"), cubin=b"", baseline_cubin=b"",
                          check_seeds=(1, 2, 3, 4, 5), timing_seed=6, kernel_name=name)


@pytest.fixture()
def fake_keeper(monkeypatch):
    keeper = arena.ArenaKeeper(0, nbytes=64, target=fake_keep)
    monkeypatch.setitem(arena._keepers, 0, keeper)
    yield keeper
    keeper.close()


def test_lends_lowest_free_arena_first(fake_keeper):
    first, second = fake_keeper.lend(), fake_keeper.lend()
    assert (first, second) == (b"gpu0-arena0-64", b"gpu0-arena1-64")
    fake_keeper.take_back(first)
    assert fake_keeper.lend() == first  # reused, not a third allocation
    assert fake_keeper.lend() == b"gpu0-arena2-64"


def test_a_keeper_that_cannot_start_lends_nothing_and_says_why():
    keeper = arena.ArenaKeeper(3, target=broken_keep)
    assert keeper.lend() is None
    assert "did not start" in keeper.error and "cupy" in keeper.error


def test_worker_keeps_its_arena_across_restarts_and_hands_it_on(fake_keeper):
    with GpuWorker(0, target=serve_reporting_arena, lend_arena=True) as worker:
        before = worker.measure(request("ok")).notes
        assert not worker.measure(request("die")).valid  # the child exits: restarted
        after = worker.measure(request("ok")).notes
        assert after["pid"] != before["pid"] and after["arena"] == before["arena"] == b"gpu0-arena0-64"
        with GpuWorker(0, target=serve_reporting_arena, lend_arena=True) as alongside:
            assert alongside.measure(request("ok")).notes["arena"] == b"gpu0-arena1-64"
    with GpuWorker(0, target=serve_reporting_arena, lend_arena=True) as later:
        assert later.measure(request("ok")).notes["arena"] == b"gpu0-arena0-64"


def test_keepers_of_several_gpus_start_side_by_side_and_one_gpus_once(monkeypatch):
    """A keeper's start is a process that imports CuPy and makes a context: two GPUs'
    start at once (one after another, the first would wait at the barrier alone and
    break it); two callers for one GPU share its one keeper."""
    import threading

    barrier = threading.Barrier(2, timeout=10)
    made = []

    class Keeper:
        def __init__(self, device_id):
            made.append(device_id)
            if device_id in (1, 2):
                barrier.wait()

    monkeypatch.setattr(arena, "ArenaKeeper", Keeper)
    monkeypatch.setattr(arena, "_keepers", {})
    monkeypatch.setattr(arena, "_starting", {})
    monkeypatch.setattr(arena.atexit, "register", lambda fn: None)
    with ThreadPoolExecutor(4) as pool:
        keepers = list(pool.map(arena.keeper, [1, 2, 3, 3]))
    assert not barrier.broken and sorted(made) == [1, 2, 3]
    assert keepers[2] is keepers[3] and arena.keeper(1) is keepers[0]
