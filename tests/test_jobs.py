"""evo run --jobs: kernels searched at once find what they find one at a time (same
checkpoint, report and event rows), and a run killed with several kernels under way
resumes to exactly those rows (each kernel's events reach events.jsonl with its save)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from conftest import needs_ptxas

KERNELS = ["gemm_tile_2x2x2", "gemm_tile_2x2x4", "gemm_tile_2x4x2"]

# evo.cli with RunDir.append_events wrapped: the process kills itself (SIGKILL) right after
# appending the rows of the first generation-2 event, whichever kernel's it is.
KILLER = """
import os, signal, sys
from evo import cli, rundir
append = rundir.RunDir.append_events
def append_then_kill(self, events):
    append(self, events)
    if any(e["type"] == "generation" and e["generation"] == 2 for e in events):
        os.kill(os.getpid(), signal.SIGKILL)
rundir.RunDir.append_events = append_then_kill
sys.exit(cli.main(sys.argv[1:]))
"""


def run_args(out, store, jobs):
    args = ["run", "--backend", "static", "--generations", "3", "--pop", "4", "--seed", "3",
            "--store", str(store), "--out", str(out), "--jobs", str(jobs), "-q"]
    for k in KERNELS:
        args += ["--kernel", k]
    return args


def rows(run_dir) -> list[str]:
    out = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        row = json.loads(line)
        row.pop("time")
        row.pop("cached", None)  # a resumed generation finds the store holding its rows
        row.pop("sources", None)  # a priors event names its store: each run has its own
        out.append(json.dumps(row, sort_keys=True))
    return sorted(out)  # kernels under way at once interleave their rows


def final(run_dir) -> tuple:
    checkpoint = json.loads((run_dir / "checkpoint.json").read_text())
    report = (run_dir / "report.md").read_text().split("Where the time went")[0]  # wall seconds
    table = [ln for ln in report.splitlines() if ln.startswith("| ")]
    priors = {k: {**p, "sources": None} for k, p in checkpoint.get("priors", {}).items()}
    for entry in checkpoint["kernels"].values():  # "cached": the store copy held them all
        for summary in entry["known"].values():
            summary.pop("cached")
    return checkpoint["kernels"], priors, table


def evo(tmp, *args, runner=("-m", "evo.cli"), check=True):
    return subprocess.run([sys.executable, *runner, *args], cwd=tmp, check=check,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def one_at_a_time(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jobs1")
    evo(tmp, *run_args(tmp / "run", tmp / "s.sqlite", 1))
    return tmp / "run"


@needs_ptxas
def test_kernels_searched_at_once_find_what_they_find_one_at_a_time(one_at_a_time, tmp_path):
    evo(tmp_path, *run_args(tmp_path / "run", tmp_path / "s.sqlite", 3))
    assert final(tmp_path / "run") == final(one_at_a_time)
    assert rows(tmp_path / "run") == rows(one_at_a_time)


@needs_ptxas
def test_a_kill_with_several_kernels_under_way_resumes_to_the_same_rows(one_at_a_time,
                                                                         tmp_path):
    # A store of its own, empty as the uninterrupted run's was: the priors (auto) learn
    # from the store as it is when the run starts (and are saved then, for the resume).
    store = tmp_path / "s.sqlite"
    killed = evo(tmp_path, *run_args(tmp_path / "run", store, 3), runner=("-c", KILLER),
                 check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    evo(tmp_path, "run", "--resume", str(tmp_path / "run"), "--jobs", "2", "-q")
    assert final(tmp_path / "run") == final(one_at_a_time)
    assert rows(tmp_path / "run") == rows(one_at_a_time)


@needs_ptxas
def test_jobs_0_is_sized_by_the_backend_and_finds_the_same(one_at_a_time, tmp_path):
    done = evo(tmp_path, *[a for a in run_args(tmp_path / "run", tmp_path / "s.sqlite", 0)
                           if a != "-q"])
    # the static backend measures one candidate at a time: four kernels at once, so all 3
    assert "searching 3 kernel(s) at once" in done.stderr + done.stdout
    assert final(tmp_path / "run") == final(one_at_a_time)


def test_auto_jobs_are_four_per_measuring_slot_within_the_kernels():
    from evo.driver import jobs_for

    assert jobs_for(3, {"measure_slots": 8}, 10, alone=False) == 3  # asked for: as asked
    assert jobs_for(0, {"measure_slots": 2}, 10, alone=False) == 8
    assert jobs_for(0, {"measure_slots": 4}, 3, alone=False) == 3
    assert jobs_for(0, {"measure_slots": 4}, 10, alone=True) == 1


def test_a_step_alone_on_the_gpu_waits_for_measurements_and_holds_new_ones_back():
    """GpuTurns: the finalist check (alone) starts only once the running measurement
    (shared) has ended, and a measurement asked for meanwhile waits until it is done."""
    import threading
    import time

    from evo.driver import GpuTurns

    turns, order = GpuTurns(), []
    measuring, asked = threading.Event(), threading.Event()

    def measurement(name, hold):
        with turns.shared():
            order.append(f"{name} starts")
            measuring.set()
            time.sleep(hold)
            order.append(f"{name} ends")

    def finalist():
        measuring.wait()
        asked.set()
        with turns.alone():
            order.append("finalist starts")
            time.sleep(0.05)
            order.append("finalist ends")

    first = threading.Thread(target=measurement, args=("first", 0.2))
    check = threading.Thread(target=finalist)
    first.start()
    check.start()
    asked.wait()
    time.sleep(0.05)  # the finalist is now waiting for the first measurement
    second = threading.Thread(target=measurement, args=("second", 0.0))
    second.start()
    for t in (first, check, second):
        t.join(5)
    assert order == ["first starts", "first ends", "finalist starts", "finalist ends",
                     "second starts", "second ends"]


def test_finalist_checks_share_the_gpu_with_each_other_and_never_with_a_measurement():
    """Two checks asked for while a measurement runs start together once it ends; a
    measurement asked for after them waits for both; a peer's timing is alone."""
    import threading
    import time

    from evo.driver import GpuTurns

    turns, order, lock = GpuTurns(), [], threading.Lock()
    running = {"measure": 0, "check": 0, "alone": 0}
    overlap = []

    def hold(kind, name, seconds, turn):
        with turn():
            with lock:
                running[kind] += 1
                overlap.append(dict(running))
                order.append(f"{name} starts")
            time.sleep(seconds)
            with lock:
                running[kind] -= 1
                order.append(f"{name} ends")

    def start(kind, name, seconds, turn, after=0.0):
        time.sleep(after)
        thread = threading.Thread(target=hold, args=(kind, name, seconds, turn))
        thread.start()
        return thread

    threads = [start("measure", "m1", 0.3, turns.shared)]
    time.sleep(0.05)
    threads += [start("check", "c1", 0.2, turns.checks), start("check", "c2", 0.2, turns.checks)]
    time.sleep(0.05)
    threads += [start("measure", "m2", 0.05, turns.shared), start("alone", "peer", 0.05, turns.alone)]
    for t in threads:
        t.join(5)
    assert order[:2] == ["m1 starts", "m1 ends"]
    assert set(order[2:4]) == {"c1 starts", "c2 starts"}  # the two checks at once
    assert order.index("m2 starts") > max(order.index("c1 ends"), order.index("c2 ends"))
    assert order.index("peer starts") > order.index("m2 ends") or \
        order.index("m2 starts") > order.index("peer ends")
    for snapshot in overlap:  # never a measurement beside a check, nor anything beside the peer
        assert not (snapshot["measure"] and snapshot["check"])
        assert not snapshot["alone"] or sum(snapshot.values()) == 1
    assert max(s["check"] for s in overlap) == 2


def test_a_kernels_steps_after_its_search_do_not_hold_a_search_slot():
    """each_kernel's ``finish`` runs without a slot: with two slots, the third item's work
    starts while the first item's finish is still running; results stay in item order and
    a finish's failure stops the run."""
    import threading
    import time

    from evo.driver import each_kernel

    events, lock = [], threading.Lock()
    finishing = threading.Event()

    def work(item, slot):
        with lock:
            events.append(f"work {item} on slot {slot}")
        if item == 2:
            assert finishing.is_set()  # item 0's finish is under way: its slot was given back
        return item * 10

    def finish(item, out):
        if item == 0:
            finishing.set()
            time.sleep(0.3)
            with lock:
                events.append("finish 0 ends")
        return out + 1

    assert each_kernel([0, 1, 2, 3], work, 2, threading.Event(), finish) == [1, 11, 21, 31]
    work_2 = next(i for i, e in enumerate(events) if e.startswith("work 2 "))
    assert work_2 < events.index("finish 0 ends")

    stop = threading.Event()

    def failing(item, out):
        raise RuntimeError(f"finish {item} failed")

    with pytest.raises(RuntimeError, match="finish . failed"):
        each_kernel([0, 1, 2], work, 2, stop, failing)
    assert stop.is_set()
