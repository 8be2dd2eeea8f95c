"""evo.learn.cost: how well the cost model ranks held-out genomes of a synthetic landscape,
and evolve's screening (deterministic, resumable, and better on a structured landscape)."""

from __future__ import annotations

import hashlib
import math
import random

import pytest

from conftest import measuring, needs_ptxas
from evo.learn.cost import CostModel, rank_correlation
from evo.driver import MemoryLedger
from evo.search import new_checkpoint, search_kernel
from genomes.variation import gene_alphabet
from harness.record import Measurement
from test_learn_steer import cfg, search

pytest.importorskip("sklearn")

GENES = [str(g) for g in gene_alphabet()]
# A landscape in log-speedup: a few genes help, one hurts a lot, one pair cancels out.
EFFECTS = {"vec_ld(width=4)": 0.35, "vec_st(width=4)": 0.15, "vec_ld(width=2)": 0.2,
           "maxnreg(n=32)": -0.9, "split_ld": 0.05, "reorder(strategy=critical_path)": 0.04}
CANCEL = ("vec_ld(width=4)", "vec_st(width=4)")


def true_y(keys: list[str]) -> float:
    y = sum(EFFECTS.get(k, 0.0) for k in keys)
    if all(k in keys for k in CANCEL):
        y -= 0.12
    noise = int(hashlib.sha256(",".join(sorted(keys)).encode()).hexdigest()[:6], 16)
    return y + 0.02 * (noise / 0xFFFFFF - 0.5)


def random_keys(rng: random.Random) -> list[str]:
    picks = [g for g in EFFECTS] + rng.sample(GENES, 12)
    return sorted(set(rng.sample(picks, rng.randint(1, 4))))


def test_rank_correlation():
    assert rank_correlation([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert rank_correlation([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert rank_correlation([1, 1, 2], [5, 5, 9]) == pytest.approx(1.0)
    assert rank_correlation([1, 2], [7, 7]) == 0.0


def test_the_model_ranks_held_out_genomes_of_a_synthetic_landscape():
    rng = random.Random(11)
    train = [random_keys(rng) for _ in range(300)]
    test = [random_keys(rng) for _ in range(200)]
    model = CostModel().fit([(k, true_y(k), 1.0) for k in train])
    rho = rank_correlation(model.predict(test), [true_y(k) for k in test])
    print(f"held-out rank correlation (Spearman), 300 training genomes: {rho:.3f}")
    assert rho > 0.8
    # With a prior that knows the main effects, 40 genomes of this kernel rank as well
    small = CostModel(dict(EFFECTS)).fit([(k, true_y(k), 1.0) for k in train[:40]])
    rho_small = rank_correlation(small.predict(test), [true_y(k) for k in test])
    print(f"with the prior's effects as a feature, 40 training genomes: {rho_small:.3f}")
    assert rho_small > 0.8


def landscape_measure(kernel: str):
    """cycles = 1000 / exp(true_y) over the genome's gene keys (a structured landscape)."""
    def measure(genomes):
        return [Measurement(kernel, "fake", True, cycles=1000.0 / math.exp(true_y(
            [str(g) for g in g_.effective().genes])), timer="fake", n=1) for g_ in genomes]
    return measure


def test_screening_is_deterministic_and_resumable():
    config = cfg(generations=5, screen=3)
    straight, ckpt, events = search(config)
    assert search(config)[1] == ckpt
    _, saved, _ = search(config, stop_after=2)
    resumed, ckpt_resumed, _ = search(config, checkpoint=saved)
    assert ckpt_resumed == ckpt and resumed.best_genome == straight.best_genome
    plain = search(cfg(generations=5))
    assert plain[1]["kernels"]["k"]["known"] != ckpt["kernels"]["k"]["known"]
    # the same budget: a first generation of pop, then at most pop - 1 new children each
    # (a child still seen after its retries is not measured again, in either search)
    for run in (events, plain[2]):
        evals = [e["evals"] for e in run if e["type"] == "generation"]
        assert evals[0] == 5 and all(0 < b - a <= 4 for a, b in zip(evals, evals[1:])), evals


def test_screening_measures_better_children():
    """What the screen does: of S children per place it measures those the model ranks
    best, so the children it measures are better on average. (Whether the search's final
    best is better too depends on the draw: over 24 seeds of 30 evaluations it was not,
    13 to 11 with 6 generations and 9 to 15 with 9, so that is not claimed.)"""
    def children(screen: int, seed: int) -> list[float]:
        config = cfg(generations=6, pop=5, seed=seed, screen=screen)
        events: list[dict] = []
        search_kernel(measuring("k", landscape_measure("k")),
                      MemoryLedger(new_checkpoint(config), kept=events), config)
        return [e["cycles"] for e in events
                if e["type"] == "eval" and e["generation"] >= 2 and e.get("cycles")]

    seeds = range(1, 33)
    plain = [c for s in seeds for c in children(1, s)]
    screened = [c for s in seeds for c in children(4, s)]
    print(f"mean cycles of the children measured over {len(seeds)} seeds: plain "
          f"{sum(plain) / len(plain):.0f}, screened {sum(screened) / len(screened):.0f}")
    assert sum(screened) / len(screened) < 0.99 * sum(plain) / len(plain)


@needs_ptxas
def test_the_model_ranks_a_kernel_it_never_saw_from_the_shipped_h100_measurements():
    from evo.learn.cost_eval import evaluate_kernel
    from evo.learn.source import SHIPPED, kb_from_paths

    kb = kb_from_paths([SHIPPED])
    entry = next(e for e in kb["kernels"] if e["kernel"] == "gemm_tile_8x6x6")
    result = evaluate_kernel(kb, entry, keep=1 / 3)
    # Trained on the other kernels alone (its own rows left out of the prior): on this
    # tile the ranking was rho 0.96 when the file was built; chance is 0.
    assert result["n"] >= 30 and result["rho"] > 0.5 and result["recall"] > 1 / 3
