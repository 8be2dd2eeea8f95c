"""The search loop with a deterministic stand-in for the harness (no ptxas, no GPU).

The stand-in scores a genome by a fixed hash of its effective genes, so results depend
only on the genome: exactly what resume determinism needs. Runs through the real
strategies, checkpoint JSON and RNG-state round trips.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from evo.config import Config
from conftest import measuring
from evo.driver import MemoryLedger
from evo.search import new_checkpoint, search_kernel
from genomes.genome import Genome
from harness.record import Measurement


def fake_measure(kernel: str):
    def measure(genomes):
        out = []
        for g in genomes:
            key = g.effective().dumps()
            h = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
            if h % 11 == 0:
                out.append(Measurement(kernel, "fake", False, "wrong result: planted"))
            else:
                out.append(Measurement(kernel, "fake", True, cycles=1000 - len(g) * 10
                                       - h % 300, timer="fake", n=1))
        return out
    return measure


def transforms_only(genomes):
    """A stand-in for ptxas: genomes with the same transforms, whatever their parameters,
    'assemble' alike (many twins, as register budgets and cache hints make on real code)."""
    return [",".join(sorted({g.transform for g in genome.effective().genes}))
            for genome in genomes]


def run(config: Config, checkpoint: dict | None = None, stop_after: int | None = None,
        code_keys=None, prior: dict | None = None, measure=None):
    """Search kernel "k" (``measure``: by default ``fake_measure``); ``stop_after``
    generations simulates an interruption. Returns (result, checkpoint, events)."""
    checkpoint = checkpoint or new_checkpoint(config)
    events: list[dict] = []
    saves = []

    class Stop(Exception):
        pass

    def save():
        saves.append(json.loads(json.dumps(checkpoint)))  # what would be on disk
        if stop_after is not None and len(saves) == stop_after:
            raise Stop

    try:
        result = search_kernel(measuring("k", measure or fake_measure("k"), code_keys),
                               MemoryLedger(checkpoint, save, events), config, prior=prior)
    except Stop:
        return None, saves[-1], events
    return result, checkpoint, events


def cfg(strategy="evolve", generations=6, pop=6, max_evals=0, seed=3) -> Config:
    return Config().override("run", strategy=strategy, generations=generations, pop=pop,
                             max_evals=max_evals, seed=seed)


def test_elitism_best_never_gets_worse():
    _, _, events = run(cfg(generations=12))
    bests = [e["best"] for e in events if e["type"] == "generation"]
    assert len(bests) == 12 and all(b is not None for b in bests)
    assert all(later <= earlier for earlier, later in zip(bests, bests[1:]))


def test_first_population_holds_the_baseline():
    _, ckpt, events = run(cfg(generations=1))
    first = [e for e in events if e["type"] == "eval"]
    assert first[0]["genome"] == {"genes": []}
    assert len(ckpt["kernels"]["k"]["state"]["population"]) == 6


@pytest.mark.parametrize("strategy,init", [("evolve", "random"), ("evolve", "sweep"),
                                           ("greedy", "random")])
def test_resume_matches_an_uninterrupted_run(strategy, init):
    config = cfg(strategy, generations=4).override("evolve", init=init)
    straight, ckpt_straight, _ = run(config)
    _, partial, _ = run(config, stop_after=2)
    resumed, ckpt_resumed, _ = run(config, checkpoint=partial)
    assert ckpt_resumed["kernels"]["k"]["state"] == ckpt_straight["kernels"]["k"]["state"]
    assert resumed.best_genome == straight.best_genome and resumed.evals == straight.evals


def test_extending_generations_continues_a_finished_run():
    straight, ckpt_straight, _ = run(cfg(generations=5))
    _, short, _ = run(cfg(generations=3))
    extended, ckpt_ext, _ = run(cfg(generations=5), checkpoint=json.loads(json.dumps(short)))
    assert ckpt_ext["kernels"]["k"]["state"] == ckpt_straight["kernels"]["k"]["state"]


def test_budget_caps_evaluations():
    result, _, events = run(cfg(generations=50, max_evals=17))
    assert result.evals == 17
    assert sum(e["type"] == "eval" for e in events) == 17


def test_sweep_evaluates_each_gene_once():
    from genomes.variation import gene_alphabet

    result, _, events = run(cfg("sweep"))
    assert result.evals == len(gene_alphabet()) + 1


def test_seed_changes_the_search():
    a, _, _ = run(cfg(seed=1))
    b, _, _ = run(cfg(seed=2))
    assert a.best_genome != b.best_genome or a.evals != b.evals


def test_local_search_tries_neighbors_of_the_best_and_keeps_resume_exact():
    base = cfg(generations=6, pop=6)
    config = base.override("evolve", local_search=2)
    result, ckpt, events = run(config)
    bests = [e["best"] for e in events if e["type"] == "generation"]
    assert all(b <= a for a, b in zip(bests, bests[1:]))
    assert result.evals > 0
    # Resume stays exact with the local search on.
    _, partial, _ = run(config, stop_after=3)
    resumed, ckpt2, _ = run(config, checkpoint=partial)
    assert ckpt2["kernels"]["k"]["state"] == ckpt["kernels"]["k"]["state"]
    # It changes the search (it is not a no-op option).
    _, plain, _ = run(base)
    assert ckpt["kernels"]["k"]["known"] != plain["kernels"]["k"]["known"]


def _twins(checkpoint: dict) -> int:
    """Evaluated genomes whose code an earlier evaluated genome already had."""
    known = [Genome.from_json(json.loads(k)) for k in checkpoint["kernels"]["k"]["known"]]
    return len(known) - len(set(transforms_only(known)))


def test_novel_code_spends_trials_on_code_not_measured_yet():
    config = cfg(generations=9, pop=5)
    _, with_codes, _ = run(config, code_keys=transforms_only)
    _, blind, _ = run(config.override("evolve", novel_code=False), code_keys=transforms_only)
    _, without, _ = run(config)  # no code_keys (a caller that cannot compile): as before
    assert blind["kernels"]["k"] == without["kernels"]["k"]
    assert _twins(with_codes) < _twins(blind) / 2
    budget = 5 + 8 * 4  # pop, then pop - 1 children (one elite) in each later generation
    assert len(with_codes["kernels"]["k"]["known"]) <= budget
    assert len(blind["kernels"]["k"]["known"]) <= budget
    # The keys are memoized, not checkpointed: a resumed search asks for them again and
    # goes on exactly as an uninterrupted one.
    _, partial, _ = run(config, stop_after=4, code_keys=transforms_only)
    _, resumed, _ = run(config, checkpoint=partial, code_keys=transforms_only)
    assert resumed["kernels"]["k"] == with_codes["kernels"]["k"]


def test_novelty_asks_for_machine_code_in_batches_not_one_genome_at_a_time():
    """ptxas runs in parallel within one code_keys call: a generation's children are looked
    up together, and again only for those still not new (at most RETRIES + 1 rounds)."""
    from evo.strategies.evolve import RETRIES

    sizes = []

    def counted(genomes):
        sizes.append(len(genomes))
        return transforms_only(genomes)

    run(cfg(generations=9, pop=5), code_keys=counted)
    assert len(sizes) <= 9 * (RETRIES + 1), sizes
    assert max(sizes) >= 4  # a whole generation's children in one call
    assert len(sizes) < 0.7 * sum(sizes), sizes  # not one call per genome


def test_neighbors_are_one_step_from_the_best():
    import random as _random

    from evo.strategies.evolve import _neighbors
    from genomes.genome import parse_inline

    class Seen:
        def seen(self, genome):
            return False

        def alphabet(self):
            from genomes.variation import gene_alphabet

            return gene_alphabet()

    best = parse_inline("vec_ld,maxnreg(n=96)")
    got = _neighbors(best, 500, Seen(), _random.Random(1))
    assert parse_inline("vec_ld,maxnreg(n=104)") in got
    assert parse_inline("vec_ld") in got and parse_inline("maxnreg(n=96)") in got
    assert parse_inline("vec_ld,maxnreg(n=96),cache_cs") in got
    assert parse_inline("vec_ld(width=2),maxnreg(n=96)") in got  # replaced in place
    assert best not in got and len(set(got)) == len(got)


def test_a_crash_while_checkpointing_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    from evo import rundir
    run = rundir.RunDir.create(tmp_path / "run", "[run]\n")
    run.write_checkpoint({"kernels": {}, "generation": 1})
    real = rundir.write_atomic
    calls = []

    def crash_on_the_new_checkpoint(path, text):
        calls.append(path.name)
        if path.name == rundir.CHECKPOINT:
            raise KeyboardInterrupt  # killed after the old one was set aside
        real(path, text)

    monkeypatch.setattr(rundir, "write_atomic", crash_on_the_new_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        run.write_checkpoint({"kernels": {}, "generation": 2})
    assert calls == [rundir.PREVIOUS, rundir.CHECKPOINT]
    assert run.read_checkpoint()["generation"] == 1
    assert run.read_checkpoint(use_previous=True)["generation"] == 1


GAINS = {"vec_ld(width=4)": 300, "vec_ld(width=2)": 150, "vec_st(width=4)": 120,
         "maxnreg(n=96)": 80, "maxnreg(n=128)": 60, "cache_st(policy=cg)": 20}


def additive_measure(genomes):
    """Cycles 1000 minus each gene's gain (genes not in GAINS cost 7): additive effects."""
    return [Measurement("k", "fake", True, timer="fake", n=1,
                        cycles=1000 - sum(GAINS.get(str(g), -7) for g in genome.effective().genes))
            for genome in genomes]


def test_sweep_init_measures_every_gene_then_stacks_the_best_per_group():
    from genomes.genome import parse_inline
    from genomes.variation import gene_alphabet

    config = cfg(generations=1, pop=5).override("evolve", init="sweep")
    checkpoint = new_checkpoint(config)
    result = search_kernel(measuring("k", additive_measure), MemoryLedger(checkpoint), config)
    known = checkpoint["kernels"]["k"]["known"]
    # the baseline, every gene alone, and the stacks of 2, 3 and 4 group winners
    assert result.evals == 1 + len(gene_alphabet()) + 3
    full = parse_inline("vec_ld(width=4),vec_st(width=4),maxnreg(n=96),cache_st(policy=cg)")
    assert Genome.from_json(result.best_genome) == full
    assert known[full.effective().dumps()]["cycles"] == 1000 - 300 - 120 - 80 - 20
    population = checkpoint["kernels"]["k"]["state"]["population"]
    assert len(population) == 5 and population[0]["genome"] == full.to_json()


def test_resume_allows_fixing_how_the_llm_endpoint_is_reached_not_what_it_is_asked():
    from evo.search import check_resumable

    base = Config().override("llm", rate=0.3, model="m1")
    checkpoint = new_checkpoint(base)
    fixed = base.override("llm", base_url="http://127.0.0.1:8000/v1", timeout=600.0,
                          retries=5, max_tokens=1024, max_tokens_field="max_completion_tokens",
                          max_calls=10, api_key_env="OTHER_KEY")
    assert check_resumable(checkpoint, fixed) is None
    assert check_resumable(checkpoint, fixed.override("run", generations=20)) is None
    for changed in (base.override("llm", model="m2"), base.override("llm", temperature=0.1),
                    base.override("llm", rate=0.5), base.override("run", seed=9)):
        assert "changes results" in check_resumable(checkpoint, changed)


def test_a_summary_reads_back_as_the_measurement_it_was():
    """evo.search.summary is the one shape results travel in (checkpoint, events, prompts);
    measurement() gives the Measurement back, with the notes the summary keeps."""
    from evo.search import measurement, summary

    m = Measurement("k", "H200", True, cycles=812.5, timer="events", n=12, p10=800.0, p90=830.0,
                    registers=32, flags=["fast-math"],
                    notes={"us_per_launch": 2.5, "bytes_moved": 8 << 20, "copy_gbps": 3900.0,
                           "caches": "warm", "max_abs_err": 2e-8, "max_rel_err": 1e-6,
                           "phases": {"dropped": 1.0}})
    back = measurement("k", json.loads(json.dumps(summary(m))))
    assert (back.cycles, back.valid, back.timer, back.n, back.registers, back.flags) == (
        812.5, True, "events", 12, 32, ["fast-math"])
    assert back.notes == {"us_per_launch": 2.5, "bytes_moved": 8 << 20, "copy_gbps": 3900.0,
                          "caches": "warm", "max_abs_err": 2e-8, "max_rel_err": 1e-6}  # not the phases
    from evo.report import best_genome
    from evo.search import KernelResult

    result = KernelResult("k", None, {"genes": []}, summary(m), evals=1, generations=1)
    assert best_genome(result).endswith("(outputs differ from the baseline's by up to 2e-08, "
                                        "1e-06 relative)")
