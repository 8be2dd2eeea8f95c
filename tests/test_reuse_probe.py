"""harness.gpu.reuse_probe on the CPU: a fake runner records where each memset goes and times a
launch by whether it found its outputs wiped; the probe's graphs and its verdict."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness import record
from harness.gpu import reuse_probe
from harness.kernels.spec import BufferParam, load_spec

HEAVY = load_spec(Path(__file__).parent / "data" / "reuse" / "heavy.toml")


class Buffer:
    def __init__(self, runner, name: str, nbytes: int = 0, offset: int = 0):
        self.runner, self.name, self.nbytes, self.offset = runner, name, nbytes, offset

    def __getitem__(self, part: slice):
        return Buffer(self.runner, self.name, part.stop - part.start, self.offset + part.start)

    @property
    def data(self):  # a device pointer: ``+ offset`` and a copy into it
        return self

    def __add__(self, offset: int):
        return Buffer(self.runner, self.name, self.nbytes - offset, self.offset + offset)

    def copy_from_device_async(self, src, nbytes, stream):
        self.runner.ops.append(("copy", self.name, self.offset, src.name, nbytes))
        self.runner.wiped[self.name] = True
        self.runner.elapsed += self.runner.fill


class FakeRunner:
    """A launch takes ``fast`` µs when its output still holds the last launch's answer
    (a cheat, with ``cheat``), else ``slow``; a fill takes ``fill`` µs."""

    stream = None

    def __init__(self, cheat: bool, fast: float = 2.0, slow: float = 10.0, fill: float = 3.0):
        self.cheat, self.fast, self.slow, self.fill = cheat, fast, slow, fill
        self.ops: list[tuple] = []
        self.wiped = {"y": True}
        self.checked: list[tuple] = []
        self.bufs = {"x": Buffer(self, "x"), "y": Buffer(self, "y")}
        self.elapsed = 0.0

    def buffers(self, spec):
        return self.bufs

    def seed_data(self, spec, seed):
        return {}, {"x": "x image", "y": "poison image"}

    def upload(self, spec, bufs, images):
        self.ops.append(("upload",))
        self.wiped["y"] = True

    def written_on_device(self, spec, images):
        return {"y": Buffer(self, "y image", 4 << 20)}

    def fill_poison(self, param, raw):
        self.ops.append(("fill", raw.name, raw.offset, param.name, param.nbytes))
        self.wiped[raw.name] = True
        self.elapsed += self.fill

    def scratch(self, nbytes):
        self.ops.append(("scratch", nbytes))
        return Buffer(self, "scratch", nbytes)

    def args(self, spec, bufs):
        return [bufs["x"], bufs["y"]]

    def launch(self, fn, spec, args, stream=None, shape=None):
        self.ops.append(("launch",))
        skipped = self.cheat and not self.wiped["y"] and not self.wiped.get("acc", False)
        self.elapsed += self.fast if skipped else self.slow
        self.wiped["y"] = False
        self.wiped["acc"] = False

    def check_sets(self, request, sets, seeds, when, canary_only=frozenset()):
        self.checked.append((seeds, when))


@pytest.fixture(autouse=True)
def no_cuda(monkeypatch):
    monkeypatch.setattr(reuse_probe, "replayable", lambda runner, run: (run, ""))

    def elapsed_us(runner, run, count=1):
        runner.elapsed = 0.0
        run()
        return runner.elapsed / count

    monkeypatch.setattr(reuse_probe, "elapsed_us", elapsed_us)


class Request:
    spec, timing_seed, launch = HEAVY, 99, None


# heavy with an inout too: an accumulator the kernel adds into (restored, not poisoned)
INOUT = dataclasses.replace(HEAVY, params=HEAVY.params[:2] + (
    BufferParam(name="acc", dtype="f32", count=1024, role="inout"),) + HEAVY.params[2:])


class InoutRequest:
    spec, timing_seed, launch = INOUT, 99, None


class InoutRunner(FakeRunner):
    def __init__(self, cheat: bool, **kw):
        super().__init__(cheat, **kw)
        self.bufs["acc"] = Buffer(self, "acc")
        self.wiped["acc"] = True

    def written_on_device(self, spec, images):
        return {"y": Buffer(self, "y image", 4 << 20), "acc": Buffer(self, "acc image", 4096)}


def test_an_honest_kernel_reads_as_timed_on_wiped_outputs_and_is_judged():
    runner = FakeRunner(cheat=False)
    notes = reuse_probe.probe(runner, Request(), "fn", us_per_launch=10.0)
    assert notes == {"reuse_probe_us": {"timed": 10.0, "wiped": 10.0, "wipes": 3.0}}
    assert runner.checked == [([99], "after timing, on wiped outputs")]
    fills = [op for op in runner.ops if op[0] == "fill"]
    assert all(op[1:] == ("y", 0, "y", HEAVY.param("y").nbytes) for op in fills)  # the outputs, whole
    per_graph = reuse_probe.LAUNCHES * reuse_probe.REPLAYS
    assert len(fills) == 2 * per_graph  # the wiped launches' and the wipes alone
    assert sum(op[0] == "launch" for op in runner.ops) == per_graph
    assert all(runner.ops[i - 1][0] == "fill" for i, op in enumerate(runner.ops) if op[0] == "launch")
    assert runner.ops[-1] == ("launch",)  # the buffers judged are a wiped launch's
    assert not any(op[0] == "scratch" for op in runner.ops)  # no decoy graph without inouts


def test_a_long_kernel_is_probed_with_fewer_launches():
    runner = FakeRunner(cheat=False)
    reuse_probe.probe(runner, Request(), "fn", us_per_launch=300.0)
    launches = sum(op[0] == "launch" for op in runner.ops)
    assert launches == 4 * reuse_probe.REPLAYS


def test_a_kernel_timed_fast_only_on_its_own_last_outputs_is_rejected_as_result_reuse():
    """The timed graph's launches found their last answer (2 µs each); wiped, every launch
    does the work (10 µs). Whatever told the timed graph apart (the outputs, the time since
    the last launch), no probe graph has to look like it: the timed figure is the one judged."""
    runner = FakeRunner(cheat=True)
    with pytest.raises(reuse_probe.ResultReuse, match=record.RESULT_REUSE) as err:
        reuse_probe.probe(runner, Request(), "fn", us_per_launch=2.0)
    assert "2.00 us per launch as timed, launched back to back" in str(err.value)
    assert "10.00 us when they are wiped" in str(err.value)
    assert runner.checked == []


def test_a_small_difference_is_not_called_reuse():
    runner = FakeRunner(cheat=False)
    assert reuse_probe.probe(runner, Request(), "fn", us_per_launch=8.5)["reuse_probe_us"]["timed"] == 8.5


def test_a_kernel_with_an_inout_is_compared_with_launches_on_kept_outputs_of_the_same_traffic():
    """Restoring an inout copies its image: wiped launches meet caches the timed ones do not,
    so the comparison is with launches whose fills and copies go to a scratch buffer."""
    runner = InoutRunner(cheat=False)
    notes = reuse_probe.probe(runner, InoutRequest(), "fn", us_per_launch=1.0)  # not compared
    assert notes == {"reuse_probe_us": {"kept": 16.0, "wiped": 16.0}}  # 10 + a fill + a copy
    copies = [op for op in runner.ops if op[0] == "copy"]
    assert {op[1] for op in copies} == {"scratch", "acc"} and {op[3] for op in copies} == {"acc image"}
    per_graph = reuse_probe.LAUNCHES * reuse_probe.REPLAYS
    assert sum(op[1] == "scratch" for op in copies) == sum(op[1] == "acc" for op in copies) == per_graph
    assert ("scratch", HEAVY.param("y").nbytes + 4096) in runner.ops
    assert runner.ops[-1] == ("launch",) and runner.checked == [([99], "after timing, on wiped outputs")]


def test_a_kernel_with_an_inout_fast_only_on_kept_outputs_is_rejected():
    runner = InoutRunner(cheat=True)
    with pytest.raises(reuse_probe.ResultReuse, match=record.RESULT_REUSE) as err:
        reuse_probe.probe(runner, InoutRequest(), "fn", us_per_launch=10.0)
    assert "8.00 us per launch when its outputs hold the last launch's answer" in str(err.value)
    assert "16.00 us when they are wiped" in str(err.value)


@pytest.mark.parametrize("dtype", ["f32", "f16", "i32", "u8", "f64"])
def test_fill_poison_writes_the_gates_poison_and_nothing_after_the_buffer(dtype):
    import numpy as np

    from harness.gpu import gate
    from harness.kernels.spec import BufferParam

    p = BufferParam(name="y", dtype=dtype, count=10, role="out")
    raw = np.full(p.nbytes + 16, 7, dtype=np.uint8)
    gate.fill_poison(p, raw)
    assert gate.is_poison(raw[:p.nbytes].view(gate.poisoned(p).dtype), dtype).all()
    assert (raw[p.nbytes:] == 7).all()
