"""How `evo run` uses the finalist check: a best that fails it is demoted to the next best,
a check that cannot run keeps the best and says so, report.md tells which."""

from __future__ import annotations

import contextlib

from genomes.genome import Genome, parse_inline
from harness.gpu import finalist
from harness.kernels.suite import find_kernel

from evo import report
from evo import finalists
from evo.checkpoint import KernelEntry
from evo.search import KernelResult

BEST, SECOND = parse_inline("coarsen(k=4)"), parse_inline("coarsen(k=2)")


def _search_state():
    known = {BEST.effective().dumps(): {"valid": True, "cycles": 100.0},
             SECOND.effective().dumps(): {"valid": True, "cycles": 120.0},
             parse_inline("block(64)").dumps(): {"valid": False, "cycles": None},
             Genome().dumps(): {"valid": True, "cycles": 200.0}}
    result = KernelResult("relu", known[Genome().dumps()], BEST.to_json(),
                          known[BEST.effective().dumps()], 4, 1)
    return KernelEntry({"known": known}), result


def _checker(reasons: list[str], seen: list, gpus: list | None = None):
    def check(spec, ptx, launch=None, gpu=None, turn=None, devices=()):
        seen.append(launch)
        with turn() if turn else contextlib.nullcontext(gpu) as gpu:
            if gpus is not None:
                gpus.append((gpu, devices))
        reason = reasons[len(seen) - 1]
        return finalist.FinalistResult(reason == "ok", reason, {"gpu_held_s": 0.5})
    return check


def test_a_best_that_fails_is_demoted_to_the_next_best(monkeypatch):
    seen, gpus = [], []
    monkeypatch.setattr(finalist, "check_finalist", _checker(
        ["memcheck: 3 errors; first: Invalid __global__ read", "ok"], seen, gpus))
    saved, result = _search_state()
    events: list = []
    held = finalists.check_best(find_kernel("relu"), result, saved, events.extend,
                                   turn=lambda: contextlib.nullcontext(2), devices=(1, 2))
    assert gpus == [(2, (1, 2))] * 2 and held == 1.0  # on the GPU each turn lent to a check
    assert Genome.from_json(result.best_genome) == SECOND and result.best["cycles"] == 120.0
    assert [d["genome"] for d in saved.finalist["demoted"]] == [str(BEST)]
    assert seen[0].grid == (1024, 1, 1)  # each candidate checked with its own launch
    assert events == [{"type": "finalist", "kernel": "relu", **saved.finalist}]
    lines = report.finalist_lines({"kernels": {"relu": saved.data}})
    assert "DEMOTED" in lines[1] and "memcheck: 3 errors" in lines[1]
    assert lines[2].startswith(f"- relu: kept {SECOND}: finalist check ok")
    # a resumed run does not check again, and keeps the same genome
    again = _search_state()[1]
    assert finalists.check_best(find_kernel("relu"), again, saved, events.extend) == 0.0
    assert Genome.from_json(again.best_genome) == SECOND and len(seen) == 2


def test_a_check_that_cannot_run_keeps_the_best_and_says_so(monkeypatch):
    monkeypatch.setattr(finalist, "check_finalist",
                        _checker(["not run: compute-sanitizer not found"], []))
    saved, result = _search_state()
    finalists.check_best(find_kernel("relu"), result, saved, lambda events: None)
    assert Genome.from_json(result.best_genome) == BEST
    lines = report.finalist_lines({"kernels": {"relu": saved.data}})
    assert "NOT RUN" in lines[1] and "kept unchecked" in lines[1]


def test_when_every_candidate_fails_the_baseline_is_kept(monkeypatch):
    monkeypatch.setattr(finalist, "check_finalist",
                        _checker(["racecheck: 2 hazards", "not deterministic: 5 elements"], []))
    saved, result = _search_state()
    finalists.check_best(find_kernel("relu"), result, saved, lambda events: None)
    assert Genome.from_json(result.best_genome) == Genome()
    assert len(saved.finalist["demoted"]) == 2


def test_each_finalist_check_of_a_run_makes_its_context_on_the_gpu_its_turn_gives(
        monkeypatch, tmp_path):
    """`evo run` on two GPUs (workers that answer at once): each kernel's finalist check
    is booked on one GPU before its processes start; they are told that GPU alone (their
    CUDA context is made there before the turn, BENCHMARKS.md session 23) and the turn
    gives them that GPU."""
    import harness.backends as backends
    import harness.gpu.worker as worker
    from evo import cli, host_bench

    monkeypatch.setattr(worker, "GpuWorker", host_bench.InstantWorker)
    monkeypatch.setattr(backends, "gpu_visible", lambda: (True, "instant workers"))
    seen = []

    def check(spec, ptx, launch=None, *, gpu=None, turn=None, devices=(), **_):
        with turn() as given:
            seen.append((spec.name, given, devices))
        return finalist.FinalistResult(True, "ok", {"gpu_held_s": 0.1})

    monkeypatch.setattr(finalist, "check_finalist", check)
    kernels = ["gemm_tile_2x2x4", "gemm_tile_4x4x4", "gemm_tile_2x4x8", "gemm_tile_4x6x8"]
    code = cli.main(["run", *[a for k in kernels for a in ("--kernel", k)], "--gpus", "0,1",
                     "--generations", "2", "--pop", "4", "--out", str(tmp_path / "run"),
                     "--store", str(tmp_path / "s.sqlite"), "-q"])
    assert code == 0
    assert seen, "no kernel's best was checked"
    for name, given, devices in seen:
        assert given in (0, 1) and devices == (given,), (name, given, devices)
