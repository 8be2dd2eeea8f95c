"""The cheats on a real GPU: the gate rejects every gate-stage cheat of cheats with
its reason and the worker recovers; the finalist-stage cheats pass the gate (they leave
the outputs right) and ``harness.gpu.finalist.check_finalist`` rejects them; legit edits pass;
clean kernels pass the finalist check, and a %clock-dependent result fails its
determinism step.

Run with ``python3 -m pytest -m gpu -x -q -rs tests/test_cheats_gpu.py`` on a machine with
an NVIDIA GPU and CuPy (``-rs`` shows why a finalist test was skipped: compute-sanitizer
missing, or refusing the device, as on gVisor machines). Every assertion message names
the cheat, its exploit class, what was expected and what came back.
"""

from __future__ import annotations

import functools

import pytest

from cheats import CHEATS, FINALIST, GATE, LEGIT, Cheat
from harness.compile import compile_ptx
from harness.gpu.finalist import MEMCHECK, NONDETERMINISTIC, RACECHECK, check_finalist
from harness.gpu.instrument import instrument
from harness.kernels.suite import find_kernel
from harness.gpu.worker import GpuWorker, MeasureRequest

pytestmark = pytest.mark.gpu

SEEDS = (11, 12, 13, 14, 15)
TIMING_SEED = 99
GATE_CHEATS = [c for c in CHEATS if c.stage == GATE]
FINALIST_CHEATS = [c for c in CHEATS if c.stage == FINALIST]
BY_NAME = {c.name: c for c in CHEATS + LEGIT}


@functools.cache
def cubin(ptx: str) -> bytes:
    result = compile_ptx(ptx)
    assert result.ok, f"ptxas refused the variant: {result.error}"
    return result.cubin


def measure(worker, kernel: str, ptx: str | None = None, launch=None):
    """The worker's verdict on variant ``ptx`` (default: the baseline) of suite ``kernel``."""
    spec = find_kernel(kernel)
    base = spec.ptx_text()
    ptx = base if ptx is None else ptx
    clock = cubin(instrument(ptx, spec.entry)) if spec.timing == "clock64" else None
    return worker.measure(MeasureRequest(
        spec=spec, cubin=cubin(ptx), baseline_cubin=cubin(base), clock_cubin=clock,
        check_seeds=SEEDS, timing_seed=TIMING_SEED, timeout_s=60.0, launch=launch))


def variant(cheat: Cheat):
    """(spec, the cheat's PTX, its launch or None, a label for messages)."""
    spec = find_kernel(cheat.kernel)
    label = f"cheat {cheat.name!r} [{cheat.exploit or 'legit'}] on {cheat.kernel}"
    return spec, cheat.make(spec.ptx_text()), cheat.launch(spec), label


def expected(cheat: Cheat) -> str:
    return f"a reason starting {cheat.reason!r}" + (f" containing {cheat.detail!r}" if cheat.detail else "")


@pytest.fixture(scope="module")
def worker():
    with GpuWorker(0) as w:
        yield w


# ---------------------------------------------------------------------- the gate


@pytest.mark.parametrize("cheat", GATE_CHEATS, ids=[c.name for c in GATE_CHEATS])
def test_the_gate_rejects_the_cheat_with_its_reason(worker, cheat):
    spec, ptx, launch, label = variant(cheat)
    m = measure(worker, cheat.kernel, ptx, launch)
    if m.valid and cheat.fallback:
        # A race that did not fire in the gate's six launches: the finalist check must see it.
        r = check_finalist(spec, ptx, launch)
        # Not a skip: where the check cannot run, evo keeps this racy variant (it says the
        # check did not run), and that is what this test is for (issue 32).
        assert r.ran, (f"{label}: ACCEPTED: the race did not fire in the gate, and the "
                       f"finalist check could not run here: {r.reason}")
        assert not r.ok and r.reason.startswith(cheat.fallback), (
            f"{label}: accepted by the gate (the race did not fire) AND by the finalist check "
            f"({r.reason}); expected {cheat.fallback!r}; details {r.details}")
        return
    assert not m.valid, (f"{label}: ACCEPTED by the gate ({m.label()}); expected {expected(cheat)}; "
                         f"notes {m.notes}")
    assert m.reason.startswith(cheat.reason) and cheat.detail in m.reason, (
        f"{label}: rejected, but for another reason: got {m.reason!r}; expected {expected(cheat)}")
    good = measure(worker, "gemm_tile_2x2x2")
    assert good.valid, f"the worker did not recover after {label}: {good.reason}"


@pytest.mark.parametrize("edit", LEGIT, ids=[c.name for c in LEGIT])
def test_a_legit_edit_passes_the_gate(worker, edit):
    spec, ptx, launch, label = variant(edit)
    m = measure(worker, edit.kernel, ptx, launch)
    assert m.valid, f"legit {label} was REJECTED: {m.reason}"
    assert m.notes.get("stress_check", "").startswith("passed"), m.notes
    assert m.cycles and m.cycles > 0, m.notes


# ---------------------------------------------------------------------- the finalist check


@pytest.mark.parametrize("cheat", FINALIST_CHEATS, ids=[c.name for c in FINALIST_CHEATS])
def test_the_gate_passes_it_and_the_finalist_check_rejects_it(worker, cheat):
    spec, ptx, launch, label = variant(cheat)
    m = measure(worker, cheat.kernel, ptx, launch)
    assert m.valid, (f"{label}: the gate now rejects it ({m.reason}); if that is right, make it a "
                     "gate-stage cheat in tests/cheats.py with that reason")
    r = check_finalist(spec, ptx, launch)
    # not a skip: on a GPU machine a check that cannot run lets this cheat through
    assert r.ran, f"{label}: the finalist check could not run here: {r.reason}"
    assert not r.ok, f"{label}: PASSED the finalist check; expected {expected(cheat)}; details {r.details}"
    assert r.reason.startswith(cheat.reason) and cheat.detail in r.reason, (
        f"{label}: finalist check said {r.reason!r}; expected {expected(cheat)}; details {r.details}")


@pytest.mark.parametrize("kernel", ["relu", "transpose", "gemm_tile_4x6x8"])
def test_a_clean_kernel_passes_the_finalist_check(kernel):
    """relu (8 MiB) and transpose (4 MiB) draw their inputs on the GPU in the check's
    processes, the one-thread tile (under 1 MiB) on the host."""
    spec = find_kernel(kernel)
    r = check_finalist(spec, spec.ptx_text())
    if not r.ran:
        pytest.skip(f"finalist check not run here: {r.reason}")
    assert r.ok, f"clean {kernel} FAILED the finalist check: {r.reason}; details {r.details}"
    assert r.details[MEMCHECK]["errors"] == 0, r.details
    if kernel == "transpose":  # shared memory: racecheck ran
        assert r.details[RACECHECK]["verdict"] == "passed", r.details
    assert r.details["determinism"].startswith("two runs bitwise identical"), r.details


def test_a_check_booked_on_one_gpu_runs_there_alone_and_still_catches_a_cheat():
    """As ``evo run`` books it: the processes see the booked GPU alone (its ordinal 0
    there, ``CUDA_VISIBLE_DEVICES`` named from this process's own), with contexts made
    before the turn; memcheck still finds an out-of-bounds read and a clean kernel passes."""
    import contextlib

    import cupy

    last = cupy.cuda.runtime.getDeviceCount() - 1
    booked = {"devices": (last,), "turn": lambda: contextlib.nullcontext(last)}
    spec = find_kernel("relu")
    clean = check_finalist(spec, spec.ptx_text(), **booked)
    if not clean.ran:
        pytest.skip(f"finalist check not run here: {clean.reason}")
    assert clean.ok, f"clean relu on GPU {last} FAILED: {clean.reason}; details {clean.details}"
    spec, ptx, launch, label = variant(BY_NAME["out-of-bounds read"])
    r = check_finalist(spec, ptx, launch, **booked)
    assert not r.ok and r.reason.startswith(MEMCHECK), f"{label} on GPU {last}: {r.reason!r}"


def test_the_determinism_step_sees_a_clock_dependent_result():
    spec, ptx, launch, label = variant(BY_NAME["%clock"])
    r = check_finalist(spec, ptx, launch)
    if not r.ran:
        pytest.skip(f"finalist check not run here: {r.reason}")
    assert not r.ok and r.reason.startswith(NONDETERMINISTIC), (
        f"{label}: expected {NONDETERMINISTIC!r} from the finalist check, got {r.reason!r}; "
        f"details {r.details}")
