"""evo.learn.steer and evolve with a prior: seeds in generation 1, a steered gene draw,
exact resume, and a cold start (no prior) unchanged. The deterministic stand-in for the
harness of test_search (no ptxas, no GPU)."""

from __future__ import annotations

import random

from evo.config import Config
from evo.learn.steer import (favoured_genes, gene_drawer, seed_genomes, seeds_with_untried,
                             untried_genes)
from conftest import measuring
from evo.driver import MemoryLedger
from evo.search import new_checkpoint, search_kernel
from genomes.genome import Genome, parse_inline
from evo.learn.priors import gene_key
from genomes.variation import applicable, gene_alphabet, mutate
from test_search import fake_measure, run

PRIOR = {"genes": {"vec_ld(width=4)": 0.4, "vec_st(width=4)": 0.1, "maxnreg(n=32)": -0.7,
                   "cache_ld(policy=cs)": 0.001},
         "seeds": ["vec_ld(width=4),vec_st(width=4)", "vec_ld(width=4)",
                   "vec_ld(width=4),vec_st(width=4)", "maxnreg(n=128),vec_ld(width=4)",
                   "vec_st(width=4)", "split_ld"],
         "neighbors": [], "pairs": {}}


def search(config: Config, prior=None, checkpoint=None, stop_after=None):
    """One kernel's search (tests/test_search.py's loop); ``stop_after`` saves simulate an
    interruption."""
    return run(config, checkpoint, stop_after, prior=prior)


def cfg(generations=5, pop=5, seed=3, **evolve) -> Config:
    return (Config().override("run", strategy="evolve", generations=generations, pop=pop,
                              seed=seed).override("evolve", **evolve))


def first_generation(events) -> list[str]:
    return [str(Genome.from_json(e["genome"])) for e in events
            if e["type"] == "eval" and e["generation"] == 1]


def test_seeds_skip_what_was_seen_and_duplicates():
    seeds = seed_genomes(PRIOR, 3, lambda g: g == parse_inline("vec_ld(width=4)"))
    assert [str(g) for g in seeds] == ["vec_ld(width=4),vec_st(width=4)",
                                       "maxnreg(n=128),vec_ld(width=4)", "vec_st(width=4)"]
    assert seed_genomes(None, 4, lambda g: False) == []


def test_the_gene_draw_favours_helpful_genes_and_still_explores():
    genes, weights = favoured_genes(PRIOR)
    assert [str(g) for g in genes] == ["vec_ld(width=4)", "vec_st(width=4)"]  # > MIN_EFFECT
    assert gene_drawer(PRIOR, 0.0) is None and gene_drawer(None, 0.5) is None
    draw = gene_drawer(PRIOR, 0.5)
    rng = random.Random(1)
    drawn = [str(draw(rng)) for _ in range(4000)]
    share = drawn.count("vec_ld(width=4)") / len(drawn)
    assert 0.35 < share < 0.5  # 0.5 x 0.8 from the prior, plus the uniform draws' share
    assert len(set(drawn)) > 20  # the uniform half explores the whole library
    again = random.Random(1)
    assert [str(draw(again)) for _ in range(4000)] == drawn  # the seeded RNG decides
    child, _ = mutate(Genome(), random.Random(5), draw=draw)
    assert child.genes  # an insert, through the drawer


def test_generation_one_holds_the_baseline_then_the_priors_seeds():
    _, _, events = search(cfg(generations=1), PRIOR)
    first = first_generation(events)
    assert first[:4] == ["(baseline)", "vec_ld(width=4),vec_st(width=4)", "vec_ld(width=4)",
                         "maxnreg(n=128),vec_ld(width=4)"]
    assert len(first) == 5  # prior_seeds = 4: the last is a seed too
    _, _, events = search(cfg(generations=1, prior_seeds=2), PRIOR)
    assert first_generation(events)[1:3] == first[1:3] and len(first_generation(events)) == 5


def test_no_prior_and_an_empty_prior_are_the_cold_start():
    cold = search(cfg(), None)
    empty = search(cfg(), {"genes": {}, "seeds": [], "pairs": {}, "neighbors": []})
    assert cold[1] == empty[1] and cold[2] == empty[2]
    steered = search(cfg(), PRIOR)
    assert steered[2] != cold[2]


def test_resume_with_a_prior_equals_an_uninterrupted_run():
    config = cfg(generations=6, local_search=1)
    straight, ckpt_straight, _ = search(config, PRIOR)
    for stop in (1, 3):
        _, saved, _ = search(config, PRIOR, stop_after=stop)
        resumed, ckpt_resumed, _ = search(config, PRIOR, checkpoint=saved)
        assert ckpt_resumed == ckpt_straight
        assert resumed.best_genome == straight.best_genome


def test_genes_no_kernel_of_the_prior_measured_are_untried():
    alphabet = [parse_inline(t).genes[0] for t in ("vec_ld(width=4)", "warp_tail", "split_ld")]
    prior = dict(PRIOR, evidence={"vec_ld(width=4)": 2.0, "split_ld": 0.3})
    assert [str(g) for g in untried_genes(prior, alphabet)] == ["warp_tail"]
    assert untried_genes(None, alphabet) == [] and untried_genes(prior, None) == []
    # the steered draw weighs the untried gene like the mean favoured gene (0.25 of 0.5)
    draw = gene_drawer(prior, 1.0, alphabet)
    rng = random.Random(2)
    drawn = [str(draw(rng)) for _ in range(3000)]
    assert 0.25 < drawn.count("warp_tail") / len(drawn) < 0.42


def test_untried_genes_that_change_the_launch_get_a_seed_without_them_too():
    """A coarsened launch hides what the other new genes do (a kernel already of 8
    elements a thread ran slower coarsened): generation 1 gets both seeds."""
    alphabet = [parse_inline(t).genes[0] for t in ("fast_sincos", "addr_rebase",
                                                   "coarsen_tile(k=2)", "coarsen_tile(k=4)",
                                                   "vec_ld(width=4)")]
    prior = dict(PRIOR, evidence={"vec_ld(width=4)": 1.0})
    got = seeds_with_untried(prior, alphabet, [parse_inline("vec_ld(width=4)")])
    assert [str(g) for g in got] == [
        "fast_sincos,vec_ld(width=4),coarsen_tile(k=4),addr_rebase",  # enabler first
        "fast_sincos,coarsen_tile(k=4)",  # the new launch alone, with its enabler
        "vec_ld(width=4),fast_sincos,addr_rebase"]
    assert seeds_with_untried(prior, alphabet[:2] + alphabet[4:], []) == [
        parse_inline("fast_sincos,addr_rebase")]  # nothing changes the launch: one seed
    many = dict(PRIOR, evidence={})
    assert seeds_with_untried(many, [g for g in gene_alphabet()], []) == []  # a thin prior


def test_an_untried_gene_that_needs_another_first_gets_it_in_its_seeds():
    """coarsen_repeat applies after fast_sincos only (libdevice's sin/cos branch): where the
    prior's first seed has no fast_sincos, the untried gene's seeds bring it."""
    alphabet = [parse_inline(t).genes[0] for t in ("fast_sincos", "coarsen_repeat(k=4)",
                                                   "coarsen_tile(k=4)", "vec_st(width=4)")]
    prior = dict(PRIOR, evidence={"fast_sincos": 1.0, "coarsen_tile(k=4)": 1.0,
                                  "vec_st(width=4)": 1.0})
    got = seeds_with_untried(prior, alphabet, [parse_inline("vec_st(width=4),coarsen_tile(k=4)")])
    assert [str(g) for g in got] == ["fast_sincos,vec_st(width=4),coarsen_repeat(k=4)",
                                     "fast_sincos,coarsen_repeat(k=4)"]


def test_generation_one_tries_an_untried_gene_on_the_first_seed():
    from harness.kernels.suite import find_kernel

    spec = find_kernel("reduce_sum")  # warp_tail changes it; the prior has no evidence on it
    alphabet = applicable(gene_alphabet(), spec.ptx_text(), spec.launch)
    known = {gene_key(g): 1.0 for g in alphabet if g.transform != "warp_tail"}
    prior = dict(PRIOR, evidence=known)
    config = cfg(generations=1)
    events: list[dict] = []
    search_kernel(measuring("reduce_sum", fake_measure("reduce_sum"), spec=spec),
                  MemoryLedger(new_checkpoint(config), kept=events), config, prior=prior)
    first = first_generation(events)
    # the first seeds, then the untried launch gene on the first and alone
    assert first == ["(baseline)", "vec_ld(width=4),vec_st(width=4)", "vec_ld(width=4)",
                     "vec_ld(width=4),vec_st(width=4),warp_tail", "warp_tail"]
    # a thin prior (most genes untried) keeps its seeds: the draw's doubt covers the rest
    thin = dict(PRIOR, evidence={})
    events.clear()
    search_kernel(measuring("reduce_sum", fake_measure("reduce_sum"), spec=spec),
                  MemoryLedger(new_checkpoint(config), kept=events), config, prior=thin)
    assert first_generation(events)[4] == "vec_st(width=4)"


def test_the_untried_seeds_take_the_last_places_of_the_seeds():
    from evo.learn.steer import in_last_places

    a, b, c, u, v = (parse_inline(g) for g in ("maxnreg(n=64)", "vec_ld(width=4)", "fast_exp",
                                                "fast_sincos", "addr_rebase"))
    assert in_last_places([a, b, c], [u, v], 3) == [a, u, v]
    assert in_last_places([a, b, c], [u, v], 2) == [a, u]  # places - 1 of them at most
    assert in_last_places([a], [u, v], 1) == [u]  # one at least
    assert in_last_places([a, b], [], 2) == [a, b]
