"""harness.gpu.timing's clock64 batching on the CPU: a fake runner stands in for the CUDA
context, and its "launches" write clock words the way the instrumented kernel does."""

from __future__ import annotations

import numpy as np
import pytest

from harness.gpu import timing as gpu_timing, instrument
from harness.phases import no_phases
from harness.kernels.suite import find_kernel
from harness.gpu.worker import MeasureRequest

AFTER_UPLOAD, STEADY = 1500, 1000  # made-up cycles: the first launch after an upload is slow


class FakeDeviceArray:
    """A slice of host memory with the bits of a CuPy array that time_clock64 uses."""

    class _Data:
        def __init__(self, ptr):
            self.ptr = ptr

    def __init__(self, host: np.ndarray, ptr: int = 0):
        self.host, self.data = host, self._Data(ptr)

    def __getitem__(self, key):
        return FakeDeviceArray(self.host[key], self.data.ptr)

    def fill(self, value):
        self.host.fill(value)

    def get(self):
        return self.host.copy()


class FakeRunner:
    phases = staticmethod(no_phases)
    cuda_errors = ()  # its stream cannot capture: every batch is launched one by one

    def __init__(self, broken: bool = False):
        self.clock_buf = FakeDeviceArray(np.zeros(4096, dtype=np.uint64))
        self.stream = type("Stream", (), {"synchronize": lambda self: None})()
        self.uploads = self.launches = self.since_upload = 0
        self.broken = broken
        self.entries: list[str] = []
        self.events: list[str] = []  # "upload", "launch" and "settle <buffer>", in order
        self.settle_out = "settle words"
        self.own_kernels = {"evo_settle": self._settle}  # so gpu_timing loads no module
        self.uploaded: dict[str, int] = {}  # buffer set -> seed of the images last uploaded
        self.launched: list[tuple[str, int]] = []  # (buffer set, its inputs' seed) per launch
        self.checked: list[tuple[list, list, str]] = []  # check_sets calls
        self.restores: list[int] = []  # seed of the images each restore put back

    def _settle(self, grid, block, args):
        assert grid == block == (1, 1, 1) and args[1] == self.settle_out
        self.events.append(f"settle {args[0]}")

    def function(self, cubin, entry, shared_mem=0):
        self.entries.append(entry)
        return "fn"

    def buffers(self, spec):
        return {"a": "buffer a", "b": "buffer b"}

    def buffer_sets(self, spec, count):
        return [self.buffers(spec)] + [{"a": f"buffer a{i}", "b": f"buffer b{i}"}
                                       for i in range(1, count)]

    def seed_data(self, spec, seed):
        return {}, {"seed": seed}

    def baseline_outputs(self, request, seed):
        assert not self.launches, "the baseline's answers come before any timed launch"
        return {}

    def check_sets(self, request, sets, seeds, when, canary_only=frozenset()):
        assert [self.uploaded[s["a"]] for s in sets] == seeds  # judged on what was uploaded
        self.checked.append(([s["a"] for s in sets], seeds, when))

    def args(self, spec, bufs):
        return [bufs["a"]]

    def placement(self, spec):
        return "fake"

    def upload(self, spec, bufs, images):
        self.uploads += 1
        self.since_upload = 0
        self.events.append("upload")
        self.uploaded[bufs["a"]] = images["seed"]

    def written_on_device(self, spec, images, slot=None):
        return {"seed": images["seed"]}

    def on_device(self, spec, images, slot=None):  # every buffer's image: restoring it is an upload
        return {"seed": images["seed"], "whole": True}

    def restore(self, bufs, kept):
        if kept.get("whole"):
            return self.upload(None, bufs, kept)
        self.events.append("restore")  # no upload: the launch after it is a timed one
        self.restores.append(kept["seed"])
        self.uploaded[bufs["a"]] = kept["seed"]

    def launch(self, fn, spec, args, stream=None, shape=None):
        word = (args[-1] - self.clock_buf.data.ptr) // 8  # this launch's clock slice
        cycles = AFTER_UPLOAD if self.since_upload == 0 else STEADY + self.launches % 3
        self.since_upload += 1
        self.launches += 1
        self.events.append("launch")
        self.launched.append((args[0], self.uploaded[args[0]]))
        if not self.broken:
            self.clock_buf.host[word:word + 2] = (np.uint64(10_000), np.uint64(10_000 + cycles))


def request(**kw) -> MeasureRequest:
    spec = find_kernel("gemm_tile_2x2x2")
    assert instrument.clock_words(spec) == 2
    return MeasureRequest(spec=spec, cubin=b"", baseline_cubin=b"", clock_cubin=b"clock", **kw)


def test_the_first_launch_after_each_upload_is_kept_out_of_the_samples():
    runner = FakeRunner()
    samples, notes = gpu_timing.time_clock64(runner, request(warmup=8, min_reps=32, max_reps=32))
    assert len(samples) == 32 and AFTER_UPLOAD not in samples
    assert set(samples) <= {STEADY, STEADY + 1, STEADY + 2}
    assert runner.uploads == 1 + 32 // gpu_timing.CLOCK_BATCH  # warm-up batch, then timed ones
    assert runner.launches == runner.uploads * (gpu_timing.CLOCK_BATCH + 1)
    assert notes["after_upload_median"] == AFTER_UPLOAD
    assert notes["launches_per_upload"] == f"1 untimed + {gpu_timing.CLOCK_BATCH} + 1 settle"
    assert runner.entries == ["gemm_tile_2x2x2"]  # no clock_entry: the kernel's own name


def test_each_batch_ends_with_one_settle_launch_on_the_first_buffer():
    runner = FakeRunner()
    gpu_timing.time_clock64(runner, request(warmup=0, min_reps=16, max_reps=16))
    batch = ["upload", "launch"] + ["restore", "launch"] * gpu_timing.CLOCK_BATCH
    assert runner.events == (batch + ["settle buffer a"]) * 2


def test_batches_alternate_between_two_input_sets_and_the_last_is_judged():
    """The result-reuse defence in clock64 timing: a batch never starts on the inputs (or
    the outputs) of the batch before it, every launch after a batch's first starts on its
    outputs restored from that batch's images (poison, inouts' inputs), and the outputs the
    last launch left are judged after timing, against the baseline on its inputs."""
    from harness.gpu import input_sets

    runner = FakeRunner()
    req = request(warmup=0, min_reps=24, max_reps=24)
    gpu_timing.time_clock64(runner, req)
    a, b = input_sets.timing_seeds(req.timing_seed)
    n = gpu_timing.CLOCK_BATCH + 1
    assert [seed for _, seed in runner.launched] == [a] * n + [b] * n + [a] * n
    assert runner.restores == [a] * (n - 1) + [b] * (n - 1) + [a] * (n - 1)
    assert runner.events[:4] == ["upload", "launch", "restore", "launch"]
    assert runner.checked == [(["buffer a"], [a], "after timing")]


def test_the_twin_entry_is_timed_when_named():
    runner = FakeRunner()
    gpu_timing.time_clock64(runner, request(warmup=0, min_reps=8, max_reps=8,
                                            clock_entry="gemm_tile_2x2x2__evo_clock"))
    assert runner.entries == ["gemm_tile_2x2x2__evo_clock"]


def test_unwritten_clock_words_fail_timing_with_the_reason():
    with pytest.raises(gpu_timing.TimingFailed, match=gpu_timing.TIMING_FAILED):
        gpu_timing.time_clock64(FakeRunner(broken=True), request(warmup=0, min_reps=8, max_reps=8))


def test_cold_clock64_timing_flushes_the_l2_before_every_launch():
    import dataclasses

    runner = FakeRunner()
    runner.l2_bytes = 50 << 20
    runner.flush_l2 = lambda: runner.events.append("flush")
    spec = dataclasses.replace(find_kernel("gemm_tile_2x2x2"), caches="cold")
    req = MeasureRequest(spec=spec, cubin=b"", baseline_cubin=b"", clock_cubin=b"clock",
                         warmup=0, min_reps=8, max_reps=8)
    _, notes = gpu_timing.time_clock64(runner, req)
    batch = (["upload", "flush", "launch"] + ["restore", "flush", "launch"] * gpu_timing.CLOCK_BATCH
             + ["settle buffer a"])
    assert runner.events == ["flush"] + batch  # the first: its buffer made before any capture
    assert notes["caches"].startswith("cold (the L2 flushed before each launch")
    warm = FakeRunner()
    _, notes = gpu_timing.time_clock64(warm, request(warmup=0, min_reps=8, max_reps=8))
    assert "flush" not in warm.events and notes["caches"].startswith("warm")


@pytest.mark.parametrize("nbytes, copies", [
    (8 << 20, 26),          # 1M-float relu: 25 others hold 200 MiB = 4 L2s of 50 MiB
    (200 << 20, 1),         # 4 L2s in one set: DRAM every launch already
    (100 << 20, 3),         # 2 others hold 200 MiB
    (4096, gpu_timing.MAX_COLD_COPIES),  # tiny: capped, partly warm (the note says so)
])
def test_cold_copies_leave_four_l2s_between_two_uses_of_one_set(nbytes, copies):
    l2 = 50 << 20
    assert gpu_timing.cold_copies(nbytes, l2) == copies
    if 1 < copies < gpu_timing.MAX_COLD_COPIES:
        assert (copies - 1) * nbytes >= gpu_timing.COLD_FACTOR * l2 > (copies - 2) * nbytes


def test_the_caches_note_says_how_the_l2_was_treated():
    import dataclasses

    relu = find_kernel("relu")
    assert gpu_timing.caches_note(relu, 8 << 20, 1, 50 << 20).startswith("warm")
    cold = dataclasses.replace(relu, caches="cold")
    assert "rotate among 26 copies" in gpu_timing.caches_note(cold, 8 << 20, 26, 50 << 20)
    assert "partly warm" in gpu_timing.caches_note(cold, 4096, 64, 50 << 20)
    assert "exceed 4x the 50 MiB L2" in gpu_timing.caches_note(cold, 512 << 20, 1, 50 << 20)


class EventsRunner(FakeRunner):
    """FakeRunner for time_events, whose CUDA parts are patched out below."""

    l2_bytes = 50 << 20

    def rotated_args(self, spec, copies, images):
        for bufs in self.buffer_sets(spec, copies):
            self.upload(spec, bufs, images[0])
        return [self.args(spec, bufs) for bufs in self.buffer_sets(spec, copies)]

    def check_sets(self, request, sets, seeds, when, canary_only=frozenset()):
        self.checked.append((when, canary_only))

    def launch(self, fn, spec, args, stream=None, shape=None):
        self.launches += 1


@pytest.mark.parametrize("with_inout", [False, True])
def test_events_timing_spares_outputs_computed_from_an_inout_after_timing(monkeypatch, with_inout):
    """After an events graph an inout holds many launches' result, and so does every
    output computed from it (a fused residual add + norm): judged by canary only, then;
    without an inout, every output is judged."""
    import dataclasses

    from harness.kernels.spec import BufferParam, ScalarParam

    monkeypatch.setattr(gpu_timing, "elapsed_us", lambda runner, run, count=1: (run(), 5.0)[1])
    monkeypatch.setattr(gpu_timing, "replayable", lambda runner, run: (run, ""))
    monkeypatch.setattr(gpu_timing, "sm_mhz", lambda runner: 1980.0)
    monkeypatch.setattr(gpu_timing, "copy_gbps", lambda runner, moved, caches="warm": 1000.0)
    roles = ("inout", "out") if with_inout else ("in", "out")
    spec = dataclasses.replace(
        find_kernel("relu"), params=(BufferParam("a", "f32", 1024, roles[0]),
                                     BufferParam("b", "f32", 1024, roles[1]),
                                     ScalarParam("n", "i32", 1024)))
    runner = EventsRunner()
    req = MeasureRequest(spec=spec, cubin=b"", baseline_cubin=b"", warmup=1, min_reps=10, max_reps=10)
    samples, notes = gpu_timing.time_events(runner, req)
    assert len(samples) == 10 and notes["us_per_launch"] == 5.0
    spared = frozenset({"a", "b"}) if with_inout else frozenset()
    assert runner.checked == [("after timing", spared)]


def test_each_input_sets_batch_is_captured_once_and_replayed(monkeypatch):
    """A batch (upload, launches, restores, settle) is captured as a graph once per input
    set and replayed after: the same launches in the same order as batches launched one
    by one, with a capture for each of the two sets alone (warm-up in whole batches)."""
    captured = []

    def replayable(runner, run):
        captured.append(run)
        run()  # the capture's own check runs it once
        return run, ""

    runner, plain = FakeRunner(), FakeRunner()
    _, said = gpu_timing.time_clock64(plain, request(warmup=10, min_reps=32, max_reps=32))
    assert said["batches"].startswith("launched one by one: capture failed")
    monkeypatch.setattr(gpu_timing, "replayable", replayable)
    samples, notes = gpu_timing.time_clock64(runner, request(warmup=10, min_reps=32, max_reps=32))
    assert len(captured) == 2 and notes["batches"] == (
        "each replayed from a CUDA graph (2 captured, 0 kept from an earlier candidate)")
    assert runner.events == plain.events and runner.launched == plain.launched
    assert runner.uploads == 2 + 32 // gpu_timing.CLOCK_BATCH  # warm-up: two whole batches
    assert len(samples) == 32 and AFTER_UPLOAD not in samples


def test_a_batch_graph_kept_from_an_earlier_request_is_given_this_ones_function(monkeypatch):
    """Where ``batch_graphs`` holds a graph for the batch's places, the batch is replayed
    from it, asked with the request's own function, and the notes count it as kept."""
    asked = []

    def replay(runner, key, fn, run):
        asked.append((key[-2:], fn))  # (input set, launches), function
        run()  # a kept graph is launched once before it counts, as a capture is
        return run, "reused"

    runner, plain = FakeRunner(), FakeRunner()
    gpu_timing.time_clock64(plain, request(warmup=10, min_reps=32, max_reps=32))
    monkeypatch.setattr(gpu_timing.batch_graphs, "replay", replay)
    samples, notes = gpu_timing.time_clock64(runner, request(warmup=10, min_reps=32, max_reps=32))
    assert notes["batches"] == "each replayed from a CUDA graph (0 captured, 2 kept from an earlier candidate)"
    assert asked == [((0, gpu_timing.CLOCK_BATCH + 1), "fn"), ((1, gpu_timing.CLOCK_BATCH + 1), "fn")]
    assert runner.events == plain.events and len(samples) == 32
