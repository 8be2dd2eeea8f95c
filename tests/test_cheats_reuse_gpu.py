"""The result-reuse cheats (cheats_reuse) on a real GPU, measured by the worker
directly, that is without the static check that rejects module state before ptxas: each
is rejected with its reason, or (STATIC) rejected by the static check alone, or (WORKS)
made to do the work on every timed launch, so it reads no faster; the legit edits pass. The static check's verdicts are
tested on the CPU (tests/test_cheats_reuse.py); here, that the GPU's own defences hold
even where it did not run, and that the evaluator rejects a module-state memo before any
GPU time.

Run with ``python3 -m pytest -m gpu -x -q tests/test_cheats_reuse_gpu.py``.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from cheats_reuse import REUSE_CHEATS, REUSE_LEGIT, STATIC, WORKS, ReuseCheat
from harness import record
from harness.compile import compile_ptx
from harness.gpu.instrument import instrument
from harness.gpu.reuse_probe import REUSE_SHARE
from harness.kernels.spec import load_spec
from harness.gpu.worker import GpuWorker, MeasureRequest

pytestmark = pytest.mark.gpu

SEEDS = (11, 12, 13, 14, 15)
TIMING_SEED = 99
HONEST_SHARE = 0.95  # a variant doing the baseline's work and more is never 5 % faster


@functools.cache
def cubin(ptx: str) -> bytes:
    result = compile_ptx(ptx)
    assert result.ok, f"ptxas refused the variant: {result.error}"
    return result.cubin


def measure(worker, cheat: ReuseCheat, ptx: str | None = None):
    spec = cheat.spec()
    base = spec.ptx_text()
    ptx = base if ptx is None else ptx
    clock = cubin(instrument(ptx, spec.entry)) if spec.timing == "clock64" else None
    return worker.measure(MeasureRequest(
        spec=spec, cubin=cubin(ptx), baseline_cubin=cubin(base), clock_cubin=clock,
        check_seeds=SEEDS, timing_seed=TIMING_SEED, timeout_s=60.0))


@pytest.fixture(scope="module")
def worker():
    with GpuWorker(0) as w:
        yield w


@pytest.mark.parametrize("cheat", REUSE_CHEATS, ids=[c.name for c in REUSE_CHEATS])
def test_a_result_reuse_cheat_is_rejected_or_honest(worker, cheat):
    spec = cheat.spec()
    m = measure(worker, cheat, cheat.make(spec.ptx_text()))
    label = f"cheat {cheat.name!r} on {cheat.kernel}"
    if cheat.expect in (STATIC, WORKS):
        from harness.hidden_state import hidden_state

        rejected = hidden_state(cheat.make(spec.ptx_text()), spec.ptx_text()) is not None
        assert rejected == (cheat.expect == STATIC), f"{label}: static check said {rejected}"
    if cheat.expect == STATIC:
        return
    if cheat.expect == WORKS:  # valid only where it did the work on every timed launch
        assert m.valid or "pre-filled" in m.reason, f"{label}: rejected for {m.reason!r}"
        if m.valid:
            base = measure(worker, cheat)
            assert m.cycles >= HONEST_SHARE * base.cycles, (
                f"{label}: reads fast, {base.cycles:.0f} -> {m.cycles:.0f} cycles; {m.notes}")
        return
    assert not m.valid, f"{label}: ACCEPTED ({m.label()}); expected {cheat.expect!r}; notes {m.notes}"
    assert m.reason.startswith(cheat.expect) and cheat.detail in m.reason, (
        f"{label}: rejected for another reason: {m.reason!r}; expected {cheat.expect!r} "
        f"containing {cheat.detail!r}")


@pytest.mark.parametrize("edit", REUSE_LEGIT, ids=[c.name for c in REUSE_LEGIT])
def test_a_legit_edit_of_the_reuse_family_passes(worker, edit):
    m = measure(worker, edit, edit.make(edit.spec().ptx_text()))
    assert m.valid, f"legit {edit.name!r} was REJECTED: {m.reason}"
    assert m.notes.get("stress_check", "").startswith("passed"), m.notes


def test_the_evaluator_rejects_a_module_state_memo_before_the_gpu(tmp_path):
    """End to end on the GPU backend: the memo genome never reaches the worker."""
    from genomes.genome import Genome, PatchGene
    from harness.backends import make_backend
    from harness.evaluate import Evaluator
    from harness.store import Store
    from harness import record
    import difflib

    cheat = next(c for c in REUSE_CHEATS if c.name == "memo values (gemm)")
    spec = cheat.spec()
    base = spec.ptx_text()
    diff = "".join(difflib.unified_diff(base.splitlines(True), cheat.make(base).splitlines(True),
                                        "a.ptx", "b.ptx"))
    with make_backend("gpu") as backend, Store(tmp_path / "s.sqlite") as store:
        ev = Evaluator(backend, store)
        [m] = ev.evaluate(spec, [Genome((PatchGene(diff),))])
        assert not m.valid and m.reason.startswith(record.HIDDEN_STATE), m.reason
        assert ev.stats.static_rejects == 1 and ev.stats.measured == 0


HEAVY = Path(__file__).parent / "data" / "reuse" / "heavy.toml"


def request(ptx: str) -> MeasureRequest:
    """heavy.toml's variant ``ptx`` against its own PTX, measured by the worker directly."""
    spec = load_spec(HEAVY)
    return MeasureRequest(spec=spec, cubin=cubin(ptx), baseline_cubin=cubin(spec.ptx_text()),
                          check_seeds=SEEDS, timing_seed=TIMING_SEED, timeout_s=60.0)


def test_a_memo_on_the_outputs_timed_with_events_is_caught_by_the_reuse_probe(worker):
    """tests/data/reuse/heavy.cu: a per-block 32-bit key in the outputs' rounding slack
    passes every output check (poisoned and pre-filled outputs match with odds 2^-32 per
    block) and skipped its work in the events graph; harness.gpu.reuse_probe times its launches
    on wiped outputs, less the wipes. The honest kernel is timed at what those take."""
    honest = worker.measure(request(load_spec(HEAVY).ptx_text()))
    assert honest.valid, honest.reason
    probe = honest.notes["reuse_probe_us"]
    assert probe["timed"] >= REUSE_SHARE * probe["wiped"], probe
    cheat = worker.measure(request((HEAVY.parent / "heavy_cheat.ptx").read_text()))
    assert not cheat.valid, f"ACCEPTED: {cheat.label()}; {cheat.notes}"
    assert cheat.reason.startswith(record.RESULT_REUSE), cheat.reason


def test_a_memo_that_tells_the_timed_graph_by_the_time_between_launches_is_caught(worker):
    """tests/data/reuse/heavy_clock.cu: heavy_cheat's memo, and it skips only when its block's
    last launch started under GAP ago. GAP is set between the honest kernel's launches back
    to back and the same spaced by one fill of its outputs, so it computes in every check,
    in the pre-filled launch and in any probe graph with a fill between launches (the probe
    until session 24 timed such a graph as its "kept" outputs, and accepted it: BENCHMARKS.md,
    session 24), and skips in the timed graph alone. Measured by the worker directly: the
    static check, which rejects its clock read before ptxas (harness.timer_reads), is not
    run here, so this is the probe's own verdict."""
    honest = worker.measure(request(load_spec(HEAVY).ptx_text()))
    assert honest.valid, honest.reason
    probe = honest.notes["reuse_probe_us"]
    gap_us = probe["timed"] + probe["wipes"] / 2
    source = (HEAVY.parent / "heavy_clock_cheat.ptx").read_text()
    assert source.count("123457") == 1  # GAP's literal
    cheat = worker.measure(request(source.replace("123457", str(int(gap_us * 1000 / 256)))))
    assert not cheat.valid, f"ACCEPTED: {cheat.label()}; {cheat.notes}"
    assert cheat.reason.startswith(record.RESULT_REUSE), cheat.reason
