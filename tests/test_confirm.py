"""evo run's last step per kernel: the baseline and the best measured again, back to back,
past the store, on a backend whose readings drift (a stand-in for a GPU)."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import needs_ptxas

from evo import run as run_mod
from evo.checkpoint import KernelEntry
from evo.config import Config
from harness.backends import Backend
from harness.record import Measurement


class DriftingBackend(Backend):
    """Cycles from the code's size, times a drift that grows 1 % per measurement."""

    name = "drifting"
    device = "Fake GPU"
    remeasures = True

    def __init__(self):
        self.calls = 0

    def measure_many(self, spec, variants, baseline=None):
        out = []
        for v in variants:
            self.calls += 1
            cycles = (1000.0 + len(v.compiled.cubin) % 500) * (1 + 0.01 * self.calls)
            out.append(Measurement(spec.name, self.device, True, cycles=cycles, timer="fake",
                                   n=1, backend=self.name))
        return out


@needs_ptxas
def test_the_best_is_measured_again_at_the_end_and_reported(tmp_path, monkeypatch):
    import harness.backends

    backend = DriftingBackend()
    monkeypatch.setattr(harness.backends, "make_backend", lambda *a, **k: backend)
    config = Config().override("run", suite=["gemm_tile_2x2x2"], generations=2, pop=3,
                               store=str(tmp_path / "store.sqlite"))
    run = run_mod.start_run(config, tmp_path / "run")
    checkpoint = run_mod.new_checkpoint(config)
    [result] = run_mod.execute(run, config, checkpoint, verbosity=0)

    searched = backend.calls
    again = result.confirmed
    assert again["genome"] == result.best_genome and again["reason"] == ""
    # two fresh readings (baseline, best), later than every reading of the search
    assert again["baseline"] > result.baseline["cycles"]
    assert again["best"] > result.best["cycles"]
    saved = json.loads((run.path / "checkpoint.json").read_text())
    assert saved["kernels"]["gemm_tile_2x2x2"]["confirmed"] == again
    events = [json.loads(ln) for ln in (run.path / "events.jsonl").read_text().splitlines()]
    assert events[-1]["type"] == "confirm" and events[-1]["best"] == again["best"]
    report = (run.path / "report.md").read_text()
    assert "measured again" in report
    assert f"{again['baseline']:.0f} -> {again['best']:.0f}" in report
    # Where the time went: each step of the kernel, in the checkpoint and the report.
    seconds = saved["seconds"]["gemm_tile_2x2x2"]
    assert {"search", "search: ptxas", "search: GPU", "finalist check", "measured again"} \
        <= set(seconds) <= {"search", "search: ptxas", "search: look-ups", "search: GPU",
                            "finalist check", "reduce", "measured again", "finalist check: GPU"}
    assert all(s >= 0 for s in seconds.values()) and seconds["search"] > 0
    # the search's parts lie within it, and are not added to the total again
    parts = ("search: ptxas", "search: look-ups", "search: GPU")
    assert sum(seconds.get(p, 0.0) for p in parts) <= seconds["search"] + 0.002
    table = report.split("Where the time went")[1]
    row = next(line for line in table.splitlines() if line.startswith("| gemm_tile_2x2x2 | "))
    steps = [c.strip() for c in table.split("| kernel |")[1].splitlines()[0].split("|")][:-1]
    cells = dict(zip(steps, (c.strip() for c in row.split("|")[2:-1])))
    whole = sum(v for k, v in seconds.items() if ": " not in k)  # the parts lie within steps
    assert cells["total"] == f"{whole:.1f}" and cells["search: GPU"] == f"{seconds['search: GPU']:.1f}"
    assert [s for s in steps if s != "search: look-ups"][:4] == [
        "search", "search: ptxas", "search: GPU", "finalist check"]

    # resumed: a confirmed best is not measured a third time
    entry = KernelEntry(saved["kernels"]["gemm_tile_2x2x2"])
    assert run_mod.confirm(backend, None, result, entry) == again
    assert backend.calls == searched


@needs_ptxas
@pytest.mark.parametrize("remeasures, confirm", [(False, True), (True, False)])
def test_no_confirmation_where_readings_are_copies_or_when_off(tmp_path, monkeypatch,
                                                               remeasures, confirm):
    import harness.backends

    backend = DriftingBackend()
    backend.remeasures = remeasures  # False: as replay and static, a second reading is a copy
    monkeypatch.setattr(harness.backends, "make_backend", lambda *a, **k: backend)
    config = Config().override("run", suite=["gemm_tile_2x2x2"], generations=1, pop=2,
                               store=str(tmp_path / "store.sqlite"), confirm=confirm)
    run = run_mod.start_run(config, tmp_path / "run")
    [result] = run_mod.execute(run, config, run_mod.new_checkpoint(config), verbosity=0)
    assert result.confirmed is None
    report = (run.path / "report.md").read_text()
    assert "measured again" not in report  # neither the column nor its note


@needs_ptxas
def test_a_peer_torch_cannot_time_takes_no_gpu_turn(tmp_path, monkeypatch):
    """relu names a peer; where torch cannot time it here (not installed, no GPU), the run
    keeps the reason and never borrows a GPU alone for it: such a turn holds back every
    measurement on that GPU while it waits."""
    import contextlib

    import harness.backends
    from harness.kernels import peer_process

    backend = DriftingBackend()
    lent = []

    @contextlib.contextmanager
    def lend(share=False):
        lent.append(share)
        yield 0

    backend.lend = lend
    monkeypatch.setattr(harness.backends, "make_backend", lambda *a, **k: backend)
    # the peer's own process finds no GPU for torch and ends before it is ready
    monkeypatch.setattr(peer_process, "torch_installed", lambda: True)
    monkeypatch.setattr(peer_process, "command", lambda path, devices: [
        sys.executable, "-c", f"print({peer_process.RESULT!r} + "
        "'{\"peer\": \"relu\", \"reason\": \"torch sees no GPU\"}')"])
    config = Config().override("run", suite=["relu"], generations=1, pop=2,
                               store=str(tmp_path / "store.sqlite"))
    run = run_mod.start_run(config, tmp_path / "run")
    run_mod.execute(run, config, run_mod.new_checkpoint(config), verbosity=0)
    saved = json.loads((run.path / "checkpoint.json").read_text())
    assert saved["kernels"]["relu"]["peer"]["reason"] == "torch sees no GPU"
    assert False not in lent  # no turn alone (finalist checks may share one: True)


@needs_ptxas
def test_a_peer_is_begun_with_its_kernels_search(tmp_path, monkeypatch):
    """The peer's process (torch's import, its inputs: seconds of host work) starts when
    the kernel's search does, not after it: the search's measurements see it started, and
    its figure reaches the checkpoint as before."""
    import time

    import harness.backends
    from harness.kernels import peer_process

    flag = tmp_path / "peer-started"

    class Watching(DriftingBackend):
        seen = []

        def measure_many(self, spec, variants, baseline=None):
            if not self.seen:  # the search's first batch: give the process time to start
                deadline = time.monotonic() + 20
                while not flag.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            self.seen.append(flag.exists())
            return super().measure_many(spec, variants, baseline)

    backend = Watching()
    backend.lend = None
    monkeypatch.setattr(harness.backends, "make_backend", lambda *a, **k: backend)
    monkeypatch.setattr(peer_process, "torch_installed", lambda: True)
    monkeypatch.setattr(peer_process, "command", lambda path, devices: [
        sys.executable, "-c", f"open({str(flag)!r}, 'w').close()\n"
        "from harness.gpu.ready_runs import wait_for_turn, done_with_gpu\n"
        "wait_for_turn(); done_with_gpu()\n"
        f"print({peer_process.RESULT!r} + '{{\"peer\": \"relu\", \"peer_us\": 1.5}}')"])
    config = Config().override("run", suite=["relu"], generations=1, pop=2,
                               store=str(tmp_path / "store.sqlite"))
    run = run_mod.start_run(config, tmp_path / "run")
    run_mod.execute(run, config, run_mod.new_checkpoint(config), verbosity=0)
    assert backend.seen and backend.seen[0]  # started before the search's first batch ended
    saved = json.loads((run.path / "checkpoint.json").read_text())
    assert saved["kernels"]["relu"]["peer"] == {"peer": "relu", "peer_us": 1.5}
