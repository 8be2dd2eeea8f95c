"""evo.exact: a best genome that rounds differently from the baseline (fast-math genes) is
swapped for one with the baseline's outputs where that one is within [run] exact_slack."""

from __future__ import annotations

import json

import pytest
from conftest import needs_ptxas

from evo import run as run_mod
from evo.config import Config
from evo.checkpoint import KernelEntry
from evo.exact import choose, exact_twin, is_exact, prefer_exact
from evo.search import KernelResult
from genomes import transforms
from genomes.genome import Genome, parse_inline
from harness.backends import Backend
from harness.record import Measurement


def _key(text: str) -> str:
    return parse_inline(text).effective().dumps() if text else Genome().dumps()


def _s(cycles, err=0.0, valid=True) -> dict:
    return {"cycles": cycles, "valid": valid, "reason": "", **({"max_rel_err": err} if err else {})}


def test_only_fast_math_transforms_say_they_change_results():
    changing = sorted(n for n, t in transforms.registry().items() if t.changes_results)
    assert changing == ["contract", "fast_div", "fast_exp", "fast_rcp", "fast_rsqrt",
                        "fast_sincos", "fast_sqrt", "ftz", "ptxas_nofmad"]
    twin = exact_twin(parse_inline("vec_st(width=4),fast_rsqrt,maxnreg(n=128),ftz(scope=all)"))
    assert str(twin) == str(parse_inline("vec_st(width=4),maxnreg(n=128)"))


def test_the_fastest_exact_variant_within_the_slack_is_kept():
    best = _key("vec_st(width=4),fast_rsqrt")
    known = {best: _s(1000, 2e-7), _key("vec_st(width=4)"): _s(1004),
             _key("maxnreg(n=128)"): _s(1003, valid=False), _key(""): _s(1100)}
    kept, why = choose(best, known[best], known, 0.01)
    assert kept == _key("vec_st(width=4)") and "+0.4 %" in why
    kept, why = choose(best, known[best], known, 0.001)
    assert kept == best and "0.4 % slower" in why and "exact_slack 0.1 %" in why
    assert choose(best, known[best], {best: known[best]}, 0.5)[0] == best
    assert not is_exact(_s(1000, 1e-7)) and not is_exact(_s(None)) and is_exact(_s(10))


def test_the_twin_is_measured_once_and_a_resume_measures_nothing():
    best = parse_inline("vec_st(width=4),fast_rsqrt")
    asked = []

    def measure(genomes):
        asked.extend(genomes)
        return [Measurement("k", "Fake GPU", True, cycles=1001.0, timer="fake", n=1, backend="f")]

    saved = KernelEntry({"known": {best.dumps(): _s(1000, 2e-7), Genome().dumps(): _s(1100)}})
    events = []
    result = KernelResult("k", _s(1100), best.to_json(), saved.known[best.dumps()], 5, 1)
    assert prefer_exact(result, saved, measure, 0.01, events.extend)
    assert [str(g) for g in asked] == [str(parse_inline("vec_st(width=4)"))]
    assert str(Genome.from_json(result.best_genome)) == "vec_st(width=4)"
    assert result.best["cycles"] == 1001.0 and events[0]["type"] == "exact"
    again = KernelResult("k", _s(1100), best.to_json(), saved.known[best.dumps()], 5, 1)
    assert prefer_exact(again, saved, measure, 0.01, events.extend)  # resumed
    assert len(asked) == 1 and again.best_genome == result.best_genome and len(events) == 1
    exact = KernelResult("k", _s(1100), Genome().to_json(), _s(1100), 5, 1)
    assert not prefer_exact(exact, KernelEntry({}), measure, 0.01, events.extend)  # nothing to choose


class FastMathBackend(Backend):
    """A stand-in GPU: 1000 cycles, 40 fewer where an exact gene changed the code, 4 fewer
    where a fast-math gene did, whose outputs then differ from the baseline's."""

    name = "fastmath"
    device = "Fake GPU"
    remeasures = True

    def measure_many(self, spec, variants, baseline=None):
        out = []
        for v in variants:
            changed = {o.gene.transform for o in v.outcomes if o.status == "applied"}
            fast = {t for t in changed if transforms.get(t).changes_results}
            cycles = 1000.0 - 40 * bool(changed - fast) - 4 * bool(fast)
            out.append(Measurement(spec.name, self.device, True, cycles=cycles, timer="fake",
                                   n=1, backend=self.name,
                                   notes={"max_rel_err": 3e-7} if fast else {}))
        return out


@needs_ptxas
@pytest.mark.parametrize("slack", [0.01, 0.001, -1.0])
def test_a_run_keeps_the_baseline_bits_where_they_cost_less_than_the_slack(tmp_path, monkeypatch, slack):
    import harness.backends

    monkeypatch.setattr(harness.backends, "make_backend", lambda *a, **k: FastMathBackend())
    config = Config().override("run", suite=["gemm_tile_2x2x2"], strategy="greedy", generations=3,
                               store=str(tmp_path / "store.sqlite"), confirm=False,
                               exact_slack=slack)
    run = run_mod.start_run(config, tmp_path / "run")
    [result] = run_mod.execute(run, config, run_mod.new_checkpoint(config), verbosity=0)
    saved = json.loads((run.path / "checkpoint.json").read_text())["kernels"]["gemm_tile_2x2x2"]
    report = (run.path / "report.md").read_text()
    best_genes = {g.transform for g in Genome.from_json(result.best_genome).genes}
    if slack < 0:  # off: the search's best, fast math and all
        assert "exact" not in saved and result.best["cycles"] == 956.0
        assert any(transforms.get(t).changes_results for t in best_genes)
        return
    assert saved["exact"]["slack"] == slack
    if slack == 0.01:  # 960 against 956: 0.4 % slower, kept
        assert result.best["cycles"] == 960.0 and is_exact(result.best)
        assert not any(transforms.get(t).changes_results for t in best_genes)
        assert "outputs bit for bit the baseline's" in report
    else:  # 0.1 %: the faster best stays, and the report says it rounds differently
        assert result.best["cycles"] == 956.0 and "rounds differently from the baseline" in report
    best_ptx = (run.path / "best" / "gemm_tile_2x2x2.genome.json").read_text()
    assert Genome.from_json(json.loads(best_ptx)) == Genome.from_json(result.best_genome)
    shown = run_mod.report.results_from_checkpoint(run, "greedy")[0]  # evo show, a report later
    assert shown.best_genome == result.best_genome and shown.best["cycles"] == result.best["cycles"]
