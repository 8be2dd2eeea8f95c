"""Greedy: the classic sequential greedy search.

From the current genome (the baseline at first), try every single-gene extension (the
gene alphabet appended at the end); keep the best if it beats the current genome, else
stop. At most ``[greedy] max_steps`` steps (default 6), each step one "generation".

| option    | default | meaning                         |
| --------- | ------- | ------------------------------- |
| max_steps | 6       | extensions tried at most        |
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from genomes.genome import Genome

from evo.options import opt

@dataclass(frozen=True)
class Options:
    """``[greedy]`` in evo.toml (``evo.config`` reads it through ``evo.strategies``)."""

    max_steps: int = opt(6, lo=1, hi=64)


BUDGET = ("max_steps",)  # options a resumed run may raise, like [run] generations


def generations(config) -> int:
    """Steps a search of this config takes at most (``[greedy] max_steps``)."""
    return config.greedy.max_steps


def start(search) -> dict:
    return {"generation": 0, "current": Genome().to_json(), "fitness": None, "stopped": False}


def step(state: dict, search) -> dict:
    current = Genome.from_json(state["current"])
    generation = state["generation"] + 1
    if state["fitness"] is None:  # first step: measure where we stand
        base = search.evaluate([current], generation=generation)[0]
        fitness = base.fitness
    else:
        fitness = state["fitness"]
    candidates = []
    for gene in search.alphabet():
        child = Genome(current.genes + (gene,)).effective()
        if child != current and child not in candidates:
            candidates.append(child)
    results = search.evaluate(candidates, generation=generation)
    stopped = True
    if results:
        best_genome, best_result = min(zip(candidates, results), key=lambda cr: cr[1].fitness)
        if best_result.fitness < fitness:
            current, fitness, stopped = best_genome, best_result.fitness, False
    return {"generation": generation, "current": current.to_json(),
            "fitness": None if math.isinf(fitness) else fitness, "stopped": stopped}


def finished(state: dict, search) -> bool:
    return (state["stopped"] or state["generation"] >= search.config.greedy.max_steps
            or search.budget_left() == 0)


def best(state: dict):
    return state["current"], state["fitness"]
