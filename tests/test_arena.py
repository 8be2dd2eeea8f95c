"""The arena keeper's lending (harness.gpu.arena) and a worker keeping its arena across restarts,
on the CPU: a fake keeper process hands out made-up handles instead of CUDA IPC handles."""

from __future__ import annotations

import os

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
