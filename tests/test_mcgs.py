"""MCGS (evo/strategies/mcgs.py) on synthetic landscapes, through the real search loop and
checkpoint JSON: it finds a landscape's optimum, merges genomes of one machine code into
one node, reads the prior, keeps its budget, and resumes exactly."""

from __future__ import annotations

import math

import pytest

from evo.config import Config
from evo.search import KernelSearch
from genomes.genome import Genome, parse_inline
from harness.record import Measurement
from test_search import run

GENES = [parse_inline(t).genes[0] for t in (
    "vec_ld(width=4)", "vec_ld(width=2)", "vec_st(width=4)", "cache_ld(policy=cg)",
    "cache_ld(policy=cs)", "fast_exp", "unroll(factor=2)", "maxnreg(n=128)")]
EFFECTS = {"vec_ld(width=4)": 0.30, "vec_ld(width=2)": 0.10, "vec_st(width=4)": 0.20,
           "cache_ld(policy=cg)": 0.10, "cache_ld(policy=cs)": -0.05, "fast_exp": -0.02,
           "unroll(factor=2)": 0.0, "maxnreg(n=128)": 0.0}
OPTIMUM = 1000 * math.exp(-0.6)  # vec_ld(4), vec_st(4), cache_ld(cg)


@pytest.fixture(autouse=True)
def small_alphabet(monkeypatch):
    monkeypatch.setattr(KernelSearch, "alphabet", lambda self: GENES)


def landscape(genomes):
    """cycles = 1000 / exp(sum of the genes' effects); unroll with fast_exp fails."""
    out = []
    for g in genomes:
        texts = {str(x) for x in g.effective().genes}
        if {"unroll(factor=2)", "fast_exp"} <= texts:
            out.append(Measurement("k", "fake", False, "wrong result: planted"))
            continue
        cycles = 1000 * math.exp(-sum(EFFECTS[t] for t in texts))
        out.append(Measurement("k", "fake", True, cycles=cycles, timer="fake", n=1))
    return out


def same_transforms(genomes):
    """A stand-in for ptxas: a register budget changes nothing (maxnreg(n=128) with or
    without is one code), so genomes that differ only by it are one node."""
    return [",".join(sorted(str(x) for x in g.effective().genes if x.transform != "maxnreg"))
            for g in genomes]


def search(config, checkpoint=None, stop_after=None, prior=None, code_keys=same_transforms):
    """tests/test_search.py's search loop on the landscape, with its code keys."""
    return run(config, checkpoint, stop_after, code_keys=code_keys, prior=prior,
               measure=landscape)


def cfg(generations=20, pop=6, max_evals=0, seed=5, **mcgs) -> Config:
    config = Config().override("run", strategy="mcgs", generations=generations, pop=pop,
                               max_evals=max_evals, seed=seed)
    return config.override("mcgs", **mcgs) if mcgs else config


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_it_finds_the_optimum_of_a_small_landscape(seed):
    result, _, _ = search(cfg(seed=seed))
    assert result.best["cycles"] == pytest.approx(OPTIMUM), result.best_genome
    best = {str(g) for g in Genome.from_json(result.best_genome).genes}
    assert {"vec_ld(width=4)", "vec_st(width=4)", "cache_ld(policy=cg)"} <= best


def test_genomes_of_one_machine_code_are_one_node():
    _, ckpt, events = search(cfg(generations=12))
    nodes = ckpt["kernels"]["k"]["state"]["nodes"]
    measured = [e["genome"] for e in events if e["type"] == "eval"]
    codes = {same_transforms([Genome.from_json(g)])[0] for g in measured}
    assert set(nodes) == codes  # a node per distinct code, whatever path reached it
    assert len(measured) > len(nodes)  # maxnreg variants met a node already there
    into = {}
    for node in nodes.values():
        for edge in node["edges"].values():
            if edge["child"] is not None:
                into[edge["child"]] = into.get(edge["child"], 0) + 1
    assert max(into.values()) >= 2  # a transposition: one node, two ways in


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_prior_orders_what_a_node_tries_first(seed):
    prior = {"genes": {"unroll(factor=2)": 0.5}}  # one gene of eight, whatever its effect here
    _, _, events = search(cfg(generations=1, pop=2, rollout=0, seed=seed), prior=prior)
    evals = [e["genome"] for e in events if e["type"] == "eval"]
    assert evals[0] == {"genes": []}  # the baseline, the root
    assert str(Genome.from_json(evals[1]).genes[0]) == "unroll(factor=2)"


def test_a_generation_measures_about_pop_and_the_budget_holds():
    result, _, events = search(cfg(generations=30, pop=6, max_evals=25))
    assert result.evals == 25
    per_generation = [e["evals"] for e in events if e["type"] == "generation"]
    assert per_generation[0] <= 1 + 6 and all(b - a <= 6 for a, b in zip(per_generation, per_generation[1:]))


def test_a_failure_is_backed_up_as_minus_one_and_never_best():
    _, ckpt, _ = search(cfg(generations=15))
    nodes = ckpt["kernels"]["k"]["state"]["nodes"]
    failed = [n for n in nodes.values() if n["reward"] == -1.0]
    assert failed and all(n["cycles"] is None for n in failed)


def test_resume_matches_an_uninterrupted_search():
    config = cfg(generations=8)
    straight, ckpt, _ = search(config)
    _, partial, _ = search(config, stop_after=3)
    resumed, again, _ = search(config, checkpoint=partial)
    assert again["kernels"]["k"]["state"] == ckpt["kernels"]["k"]["state"]
    assert resumed.best_genome == straight.best_genome and resumed.evals == straight.evals


def test_without_machine_code_keys_a_node_is_a_genome():
    result, ckpt, _ = search(cfg(generations=6), code_keys=None)
    assert all(k.startswith("genome ") for k in ckpt["kernels"]["k"]["state"]["nodes"])
    assert result.best["cycles"] < 1000


def test_actions_that_assemble_to_the_node_itself_open_the_next_ones(monkeypatch):
    """A register budget the kernel never reaches is the root's own code: the first two
    actions the prior opens loop back, and the search opens more instead of stopping."""
    noop = [parse_inline(t).genes[0] for t in ("maxnreg(n=128)", "maxnreg(n=255)")]
    monkeypatch.setattr(KernelSearch, "alphabet", lambda self: noop + [GENES[0], GENES[2]])
    prior = {"genes": {"maxnreg(n=128)": 0.5, "maxnreg(n=255)": 0.5}}
    result, ckpt, events = search(cfg(generations=4, pop=2, rollout=0), prior=prior)
    assert {str(g) for g in Genome.from_json(result.best_genome).genes} == {
        "vec_ld(width=4)", "vec_st(width=4)"}  # the best of this space's four codes
    generations = [e["generation"] for e in events if e["type"] == "generation"]
    assert generations[:2] == [1, 2]  # not stopped after the first


def test_a_nodes_actions_follow_what_genes_gained_after_the_ones_it_holds():
    """The prior's gene -> next-gene gains condition a node's order: cache_ld(cs) did
    nothing alone on other kernels but gained after vec_ld(4) there, so a node holding
    vec_ld(4) tries it first, while the root tries the gene with the best effect alone."""
    import random
    from types import SimpleNamespace

    from evo.strategies import mcgs

    prior = {"genes": {"unroll(factor=2)": 0.1, "cache_ld(policy=cs)": 0.0},
             "after": {"vec_ld(width=4)>cache_ld(policy=cs)": 0.5,
                       "vec_ld(width=4)>unroll(factor=2)": -0.2}}
    stub = SimpleNamespace(prior=prior, rng=random.Random(0), alphabet=lambda: GENES)
    assert mcgs._actions(stub, Genome())[0] == "unroll(factor=2)"
    held = Genome.from_json({"genes": ["vec_ld(width=4)"]})
    order = mcgs._actions(stub, held)
    assert order[0] == "cache_ld(policy=cs)"
    assert mcgs._weight(stub, "cache_ld(policy=cs)", ("vec_ld(width=4)",)) == pytest.approx(6.0)
    assert mcgs._weight(stub, "unroll(factor=2)", ("vec_ld(width=4)",)) == 1.0  # it lost there


def test_generation_one_measures_the_priors_seeds_as_edges_from_the_root():
    """Seeds of a code already taken (the root's, another seed's) are left out; each seed
    kept is measured in generation 1 as one edge from the root that adds its whole stack,
    and the search goes on from the best of them."""
    prior = {"seeds": ["vec_ld(width=4),vec_st(width=4)", "maxnreg(n=128)",
                       "vec_st(width=4),vec_ld(width=4)", "cache_ld(policy=cs),fast_exp",
                       "vec_ld(width=2)"]}
    result, ckpt, events = search(cfg(generations=6, pop=5, seed=3), prior=prior)
    evals = [str(Genome.from_json(e["genome"])) for e in events if e["type"] == "eval"]
    assert evals[:4] == ["(baseline)", "vec_ld(width=4),vec_st(width=4)",
                         "cache_ld(policy=cs),fast_exp", "vec_ld(width=2)"]
    state = ckpt["kernels"]["k"]["state"]
    root = state["nodes"][state["root"]]
    seed_edge = root["edges"]["vec_ld(width=4),vec_st(width=4)"]
    assert seed_edge["child"] is not None and seed_edge["n"] >= 1
    assert result.best["cycles"] == pytest.approx(OPTIMUM)


def test_a_search_with_seeds_resumes_exactly():
    prior = {"seeds": ["vec_ld(width=4),vec_st(width=4)", "vec_ld(width=2)"]}
    config = cfg(generations=6, pop=4)
    straight, ckpt, _ = search(config, prior=prior)
    _, partial, _ = search(config, stop_after=2, prior=prior)
    resumed, again, _ = search(config, checkpoint=partial, prior=prior)
    assert again["kernels"]["k"]["state"] == ckpt["kernels"]["k"]["state"]
    assert resumed.best_genome == straight.best_genome


def test_genes_the_prior_never_measured_ride_on_the_first_seed(monkeypatch):
    """As evolve's generation 1: a gene no kernel of the prior has evidence on is tried in
    generation 1, on top of the first seed, in the last seed's place."""
    monkeypatch.setattr(KernelSearch, "draw_from", lambda self: GENES)  # as for a known spec
    prior = {"seeds": ["vec_ld(width=4)", "vec_ld(width=2)"],
             "evidence": {str(g): 1.0 for g in GENES if str(g) != "cache_ld(policy=cg)"}}
    _, _, events = search(cfg(generations=1, pop=3, seed=3), prior=prior)
    evals = [str(Genome.from_json(e["genome"])) for e in events if e["type"] == "eval"]
    assert evals[:3] == ["(baseline)", "vec_ld(width=4)", "vec_ld(width=4),cache_ld(policy=cg)"]


def test_a_dead_end_under_the_best_node_does_not_end_the_search():
    """Every genome holding vec_ld(width=4) assembles to one code (a gene that makes the
    others no-ops): its node, the best, has nothing to open but loops back to itself. The
    search must go on elsewhere for its whole budget, not stop at that node."""
    def codes(genomes):
        return ["ld4" if "vec_ld(width=4)" in {str(g) for g in genome.effective().genes}
                else ",".join(sorted(str(g) for g in genome.effective().genes))
                for genome in genomes]

    result, _, events = search(cfg(generations=15, pop=6, rollout=0), code_keys=codes)
    generations = [e["generation"] for e in events if e["type"] == "generation"]
    assert generations == list(range(1, 16))  # never stuck
    # Every simulation finds something to expand: the whole budget is measured (before,
    # walks into that node came back empty and the search measured 78 of 90).
    assert result.evals >= 1 + 15 * 6 - 3
