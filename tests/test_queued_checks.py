"""harness.gpu.queued_checks on the CPU: the queued check of a small kernel, with NumPy
standing in for the device (the arena, the staging area, the launches), and the real
judging: the same verdicts and reasons as the check launched one at a time
(tests/test_cheats.py), the launches it queues, and the baseline's outputs it caches."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from harness.gpu import gate, input_sets
from harness.gpu.buffers import ArenaBuffers, guard_ranges
from harness.gpu.queued_checks import QueuedChecks, _slot_sizes
from harness.gpu.runner import Runner, _Failed
from harness.kernels.suite import find_kernel
from harness.phases import no_phases

HEAD = 4096  # the fake arena's head before the first buffer
SEEDS = (11, 12, 13, 14, 15)


class Dev:
    """A NumPy array standing in for a CuPy one (slices are views, ``get`` a copy)."""

    def __init__(self, host: np.ndarray):
        self.host = host

    def __getitem__(self, key):
        return Dev(self.host[key])

    @property
    def nbytes(self):
        return self.host.nbytes

    def get(self):
        return self.host.copy()


class FakeCupy:
    uint8, int32 = np.uint8, np.int32

    @staticmethod
    def empty(n, dtype):
        return Dev(np.full(n, 0xAB, dtype=dtype))

    @staticmethod
    def zeros(n, dtype):
        return Dev(np.zeros(n, dtype=dtype))


def relu(x, y, arena, y_offset, launch):
    y[:] = np.maximum(x, 0)


class FakeRunner(QueuedChecks):
    """The Runner's primitives in NumPy; its judging methods are the Runner's own."""

    phases = staticmethod(no_phases)
    cuda_errors = (RuntimeError,)
    stream = type("Stream", (), {"synchronize": lambda self: None})()
    cp = FakeCupy
    baseline_key, judged_baseline, baseline_outputs = (
        Runner.baseline_key, Runner.judged_baseline, Runner.baseline_outputs)
    digest = Runner.digest
    _changed_guard_reason = ArenaBuffers._changed_guard_reason

    def __init__(self, variant, spec):
        self.variant, self.spec = variant, spec
        y = spec.param("y")
        # laid out as the runner's arena and a staging slot lay them (queued_checks.spans)
        self.offsets = {"x": HEAD, "y": HEAD + _slot_sizes(spec)[0]}
        end = self.offsets["y"] + y.nbytes + gate.CANARY_BYTES + 8192
        self._arena = np.zeros(end, dtype=np.uint8)
        self.bufs = {name: Dev(self._arena[at:at + spec.param(name).nbytes + gate.CANARY_BYTES])
                     for name, at in self.offsets.items()}
        self._seeds, self._baselines, self._staging, self._digests = {}, OrderedDict(), {}, {}
        self.launched: list[str] = []
        self.waits = 0

    # the device's side, in NumPy
    def judged_on_device(self, spec):
        return False

    def buffers(self, spec):
        return self.bufs

    def guards(self, spec):
        layout = [(n, at, spec.param(n).nbytes) for n, at in self.offsets.items()]
        return guard_ranges(layout, len(self._arena))

    def args(self, spec, bufs):
        return [bufs["x"], bufs["y"]]

    def function(self, cubin, entry, shared_mem=0):
        return cubin

    def seed_data(self, spec, seed):
        if seed not in self._seeds:
            self._seeds[seed] = Runner._make_seed_data(spec, seed, np)
        return self._seeds[seed]

    def copy_queued(self, dst, src):
        dst.host[:] = src if isinstance(src, np.ndarray) else src.host

    def restore(self, bufs, kept):
        for name, image in kept.items():
            self.copy_queued(bufs[name], image)

    def arena_span(self, spec, nbytes):
        return Dev(self._arena[HEAD:HEAD + nbytes])

    def launch(self, fn, spec, args, stream=None, shape=None):
        self.launched.append(fn.decode())
        x = self.bufs["x"].host[:spec.param("x").nbytes].view(np.float32)
        y = self.bufs["y"].host[:spec.param("y").nbytes].view(np.float32)
        kernel = relu if fn == b"baseline" else self.variant
        kernel(x, y, self._arena, self.offsets["y"], len(self.launched))

    def fill_guards(self, guards):
        for _, lo, hi in guards:
            self._arena[lo:hi] = gate.CANARY_BYTE

    def flag_changed_guards(self, guards, flag):
        flag.host[0] = int(any((self._arena[lo:hi] != gate.CANARY_BYTE).any()
                               for _, lo, hi in guards))


def check(variant):
    spec = find_kernel("relu@64K")
    runner = FakeRunner(variant, spec)
    request = type("Request", (), {"spec": spec, "cubin": b"variant", "baseline_cubin": b"baseline",
                                   "launch": None, "check_seeds": SEEDS, "timing_seed": 99,
                                   "check_reference": False})()
    return runner, request


def test_an_honest_variant_passes_and_every_launch_is_queued():
    runner, request = check(relu)
    assert runner.check_queued(request) == {"max_abs_err": 0.0, "max_rel_err": 0.0}
    # the baseline on the five check seeds, the two timing seeds and the stress seed, then
    # the variant on the five and once pre-filled
    assert runner.launched == ["baseline"] * 8 + ["variant"] * 6
    stress = input_sets.stress_seed(SEEDS[0])
    for seed in (*SEEDS, *input_sets.timing_seeds(99), stress):  # cached for timing and stress
        y = runner.baseline_outputs(request, seed)["y"]
        assert (y == np.maximum(runner.seed_data(request.spec, seed)[0]["x"], 0)).all()
    assert runner.launched == ["baseline"] * 8 + ["variant"] * 6  # nothing launched again


VARIANT = 8  # the baseline's launches come first: the variant's n-th launch is VARIANT + n


def underflow(x, y, arena, y_offset, launch):
    relu(x, y, arena, y_offset, launch)
    arena[y_offset - 4:y_offset] = 0  # y[-1]


def remember_from_the_third(x, y, arena, y_offset, launch):
    relu(x, y, arena, y_offset, launch)
    if launch >= VARIANT + 3:  # state kept past the buffers
        end = y_offset + y.nbytes + gate.CANARY_BYTES
        arena[end + 64:end + 72] = 7


def write_then_put_back(x, y, arena, y_offset, launch):
    relu(x, y, arena, y_offset, launch)
    end = y_offset + y.nbytes + gate.CANARY_BYTES
    arena[end + 64] = 7 if launch == VARIANT + 2 else gate.CANARY_BYTE


def skip_if_written(x, y, arena, y_offset, launch):
    if np.isnan(y).all():  # computes only over the poison
        relu(x, y, arena, y_offset, launch)


def wrong_on_the_fourth(x, y, arena, y_offset, launch):
    relu(x, y, arena, y_offset, launch)
    if launch == VARIANT + 4:
        y[7] += 1.0


def clobber(x, y, arena, y_offset, launch):
    relu(x, y, arena, y_offset, launch)
    x[0] = 123.0


@pytest.mark.parametrize("variant, reason", [
    (underflow, r"^out-of-bounds write: 4 bytes of the arena outside the kernel's buffers "
                r"changed, before y \(arena \+0x[0-9a-f]+\) \(seed 11\)$"),
    (remember_from_the_third, r"^out-of-bounds write: 8 bytes .* after y .*\(seed 13\)$"),
    (write_then_put_back, r"^out-of-bounds write: .*put back \(seed 12\)$"),
    (skip_if_written, r"^wrong result: .*\(seed 12, outputs pre-filled with its own results "
                      r"on seed 11\)$"),
    (wrong_on_the_fourth, r"^wrong result: .*\(seed 14\)$"),
    (lambda x, y, arena, y_offset, launch: None, r"^output not written: .*\(seed 11\)$"),
    (clobber, r"^input modified: 1 of 65536 elements of x changed; first x\[0\] \(seed 11\)$"),
], ids=["write before y", "state past the buffers", "guard put back", "skips when written",
        "wrong on one seed", "nothing written", "input clobbered"])
def test_a_failing_variant_is_named_by_its_first_failing_launch(variant, reason):
    """Judged in launch order, guards before outputs, inputs before outputs: the reason
    and the seed the check launched one at a time gives (tests/test_cheats.py)."""
    runner, request = check(variant)
    with pytest.raises(_Failed, match=reason):
        runner.check_queued(request)


def exact_only_in_the_normal_range(x, y, arena, y_offset, launch):
    relu(x, y, arena, y_offset, launch)
    y[np.abs(x) > 100] = 0  # an approximation that holds over the normal fills alone


def stops_after_the_checks(x, y, arena, y_offset, launch):
    if launch <= VARIANT + 6:  # the check's six launches; after them, a launch counter says stop
        relu(x, y, arena, y_offset, launch)


@pytest.mark.parametrize("variant", [exact_only_in_the_normal_range, stops_after_the_checks])
def test_the_stress_check_after_timing_is_one_queued_launch_judged_norm_wise(variant):
    """The runner's stress check for a kernel whose checks are queued: the variant once more
    on the stress seed, queued and judged as check_seed judges it (norm-wise, named
    "after timing"): a variant right only where the normal fills reach, or one that stops
    working once the checks are over, fails it; an honest one passes."""
    stress = input_sets.stress_seed(SEEDS[0])
    runner, request = check(relu)
    runner.check_queued(request)
    runner.queued_launches(request, [(stress, "after timing", False)])
    assert runner.launched[-1] == "variant" and len(runner.launched) == 8 + 6 + 1
    runner, request = check(variant)
    runner.check_queued(request)  # both pass the checks
    with pytest.raises(_Failed, match=rf"^(wrong result|output not written): .*"
                                      rf"\({input_sets.seed_label(stress)}, after timing\)$"):
        runner.queued_launches(request, [(stress, "after timing", False)])
