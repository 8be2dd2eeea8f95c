"""harness.gpu.reuse_probe on the CPU: a fake runner records where each memset goes and times a
launch by whether it found its outputs wiped; the probe's graphs and its verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import record
from harness.gpu import reuse_probe
from harness.kernels.spec import load_spec

HEAVY = load_spec(Path(__file__).parent / "data" / "reuse" / "heavy.toml")


class Buffer:
    def __init__(self, runner, name: str, nbytes: int = 0, offset: int = 0):
        self.runner, self.name, self.nbytes, self.offset = runner, name, nbytes, offset

    def __getitem__(self, part: slice):
        return Buffer(self.runner, self.name, part.stop - part.start, self.offset + part.start)


class FakeRunner:
    """A launch takes ``fast`` µs when its output still holds the last launch's answer
    (a cheat, with ``cheat``), else ``slow``."""

    stream = None

    def __init__(self, cheat: bool, fast: float = 2.0, slow: float = 10.0):
        self.cheat, self.fast, self.slow = cheat, fast, slow
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

    def scratch(self, nbytes):
        self.ops.append(("scratch", nbytes))
        return Buffer(self, "scratch", nbytes)

    def args(self, spec, bufs):
        return [bufs["x"], bufs["y"]]

    def launch(self, fn, spec, args, stream=None, shape=None):
        self.ops.append(("launch",))
        skipped = self.cheat and not self.wiped["y"]
        self.elapsed += self.fast if skipped else self.slow
        self.wiped["y"] = False

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


def test_an_honest_kernel_reads_the_same_on_kept_and_wiped_outputs_and_is_judged():
    runner = FakeRunner(cheat=False)
    notes = reuse_probe.probe(runner, Request(), "fn")
    assert notes == {"reuse_probe_us": {"kept": 10.0, "wiped": 10.0}}
    assert runner.checked == [([99], "after timing, on wiped outputs")]
    fills = [op for op in runner.ops if op[0] == "fill"]
    assert {op[1] for op in fills} == {"scratch", "y"}  # the decoy, then the outputs
    assert all(op[2:] == (0, "y", HEAVY.param("y").nbytes) for op in fills)
    per_graph = reuse_probe.LAUNCHES * reuse_probe.REPLAYS
    assert sum(op[1] == "y" for op in fills) == sum(op[1] == "scratch" for op in fills) == per_graph
    assert runner.ops.index(("scratch", HEAVY.param("y").nbytes)) < runner.ops.index(fills[0])


def test_a_long_kernel_is_probed_with_fewer_launches():
    runner = FakeRunner(cheat=False)
    reuse_probe.probe(runner, Request(), "fn", us_per_launch=300.0)
    launches = sum(op[0] == "launch" for op in runner.ops)
    assert launches == 2 * 4 * reuse_probe.REPLAYS


def test_a_kernel_fast_only_on_its_own_last_outputs_is_rejected_as_result_reuse():
    runner = FakeRunner(cheat=True)
    with pytest.raises(reuse_probe.ResultReuse, match=record.RESULT_REUSE) as err:
        reuse_probe.probe(runner, Request(), "fn")
    assert "2.00 us per launch when its outputs hold" in str(err.value)
    assert "10.00 us when they are wiped" in str(err.value)
    assert runner.checked == []


def test_a_small_difference_is_not_called_reuse():
    runner = FakeRunner(cheat=True, fast=9.0, slow=10.0)  # 10 % faster on kept outputs
    assert reuse_probe.probe(runner, Request(), "fn")["reuse_probe_us"]["kept"] == 9.0


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
