"""evolve as a DEAP program: its toolbox's operators, every draw from the search's RNG
(DEAP's selTournament included, which draws from the global ``random`` module), one
batch evaluation per generation, and exact resume whatever the global generator does.
The deterministic stand-in for the harness of test_search (no ptxas, no GPU)."""

from __future__ import annotations

import json
import random
import sys
import threading

import pytest
from deap import tools

from evo.config import Config
from conftest import measuring
from evo.driver import MemoryLedger
from evo.search import KernelSearch, new_checkpoint, search_kernel
from evo.strategies import evolve
from evo.strategies.evolve import Individual, toolbox
from genomes.genome import Genome, parse_inline
from genomes.variation import crossover_one_point, crossover_uniform, mutate
from test_search import cfg, fake_measure, run


@pytest.fixture(autouse=True)
def _global_random_state():
    """These tests seed and draw from the global generator: give other tests theirs back."""
    state = random.getstate()
    yield
    random.setstate(state)


def kernel_search(config: Config, seed: int = 5, measure=None) -> KernelSearch:
    return KernelSearch("k", config, random.Random(seed), measure or fake_measure("k"),
                        lambda events: None)


def population(fitnesses) -> list[Individual]:
    genomes = ["vec_ld(width=4)", "maxnreg(n=64)", "cache_ld(policy=cs)", "split_ld",
               "vec_st(width=2)", "maxnreg(n=128),vec_ld(width=2)"]
    return [Individual(parse_inline(g), f) for g, f in zip(genomes, fitnesses)]


def test_the_toolbox_registers_deaps_operators_with_the_options():
    config = cfg().override("evolve", tournament=4, init_max_len=2)
    tb = toolbox(kernel_search(config))
    assert tb.select.__wrapped__ is tools.selTournament
    assert tb.select.keywords == {"tournsize": 4}
    assert tb.elites.func is tools.selBest
    for alias in ("individual", "mate", "mutate", "evaluate", "clone", "map"):
        assert callable(getattr(tb, alias))
    ind = tb.individual()
    assert isinstance(ind, Individual) and 1 <= len(ind) <= 2 and not ind.fitness.valid


def test_selection_is_selTournament_drawing_from_the_search_rng_only():
    search = kernel_search(cfg(), seed=7)
    tb = toolbox(search)
    pop = population([900.0, 850.0, float("inf"), 850.0, 700.0, 990.0])
    random.seed(123)
    outside = random.getstate()
    chosen = tb.select(pop, 20)
    assert random.getstate() == outside  # the global generator is left as it was
    # The same draws as a tournament written against the search's RNG (ties: first drawn).
    ref = random.Random(7)
    expect = [max((pop[ref.randrange(len(pop))] for _ in range(3)), key=lambda i: i.fitness)
              for _ in range(20)]
    assert [id(i) for i in chosen] == [id(i) for i in expect]
    assert tb.select.keywords["tournsize"] == 3
    # ... and the search's RNG moved on exactly as far.
    assert search.rng.getstate() == ref.getstate()


def test_a_failing_operator_still_gives_the_global_state_back():
    rng = random.Random(1)
    random.seed(9)
    outside = random.getstate()

    def broken(individuals, k):
        random.random()
        raise RuntimeError("planted")

    with pytest.raises(RuntimeError):
        evolve.drawing_from(rng, broken)([], 1)
    assert random.getstate() == outside
    ref = random.Random(1)
    ref.random()
    assert rng.getstate() == ref.getstate()  # its draw was the search's


def test_mate_and_mutate_are_deap_shaped_and_seeded():
    config = cfg()
    a, b = population([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])[4:6]
    for seed in range(6):
        search = kernel_search(config, seed=seed)
        tb = toolbox(search)
        c1, c2 = tb.mate(a, b)
        ref = random.Random(seed)
        cross = crossover_one_point if ref.random() < 0.5 else crossover_uniform
        assert (c1.genome, c2.genome) == cross(a.genome, b.genome, ref)
        assert not c1.fitness.valid and not c2.fitness.valid
        (m,) = tb.mutate(c1)
        assert isinstance(m, Individual) and not m.fitness.valid
        assert m.genome == mutate(c1.genome, ref, config.evolve.max_len)[0]
        assert search.rng.getstate() == ref.getstate()


def test_evaluate_takes_a_generation_in_one_batch():
    search = kernel_search(cfg(generations=4, pop=6))
    batches = []
    inner = search.evaluate

    def evaluate(genomes, generation):
        batches.append((generation, len(genomes)))
        return inner(genomes, generation)

    search.evaluate = evaluate
    state = evolve.start(search)
    while not evolve.finished(state, search):
        state = evolve.step(state, search)
    assert batches == [(1, 6), (2, 5), (3, 5), (4, 5)]  # pop 6, one elite kept
    tb = toolbox(search)
    fits = tb.evaluate([Individual(Genome()), Individual(parse_inline("maxnreg(n=64)"))], 9)
    assert all(isinstance(f, tuple) and len(f) == 1 for f in fits)


def json_only(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and json_only(v) for k, v in value.items())
    if isinstance(value, list):
        return all(json_only(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


@pytest.mark.parametrize("evolve_options", [
    {"init": "random"}, {"init": "sweep"},
    {"init": "random", "elites": 2, "tournament": 2, "cxpb": 0.9, "local_search": 1},
])
def test_resume_is_exact_whatever_the_global_generator_does(evolve_options):
    config = cfg(generations=5).override("evolve", **evolve_options)
    random.seed(1)
    straight, ckpt, _ = run(config)
    assert json_only(ckpt) and json.loads(json.dumps(ckpt)) == ckpt
    random.seed(2)
    _, partial, _ = run(config, stop_after=2)
    random.seed(3)
    [random.random() for _ in range(17)]
    resumed, ckpt_resumed, _ = run(config, checkpoint=partial)
    assert ckpt_resumed["kernels"]["k"] == ckpt["kernels"]["k"]
    assert resumed.best_genome == straight.best_genome


def test_the_search_neither_reads_nor_moves_the_global_generator():
    calls = []

    def noisy(kernel):
        inner = fake_measure(kernel)

        def measure(genomes):
            calls.append(random.random())  # someone else's draw, between DEAP's
            return inner(genomes)
        return measure

    config = cfg(generations=6)
    random.seed(11)
    _, quiet, _ = run(config)
    random.seed(12)
    ckpt = new_checkpoint(config)
    search_kernel(measuring("k", noisy("k")), MemoryLedger(ckpt), config)
    assert ckpt["kernels"]["k"] == quiet["kernels"]["k"]
    # The global generator moved by the measure's own draws only.
    ref = random.Random(12)
    assert calls == [ref.random() for _ in calls] and len(calls) >= 5
    assert random.getstate() == ref.getstate()


def test_searches_in_threads_equal_searches_one_after_another():
    """evo bench runs searches in threads: their loans of the global generator to DEAP's
    selTournament must not overlap (a tiny switch interval makes overlaps likely)."""
    configs = [cfg(generations=8, pop=12, seed=s).override("evolve", tournament=8)
               for s in range(6)]
    alone = [run(c)[1]["kernels"]["k"] for c in configs]
    together: list = [None] * len(configs)

    def one(i):
        together[i] = run(configs[i])[1]["kernels"]["k"]

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(configs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert together == alone
