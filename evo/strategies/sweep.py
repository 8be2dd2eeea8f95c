"""Sweep: every single gene alone on the baseline — the landscape of the transform library.

One generation evaluates the baseline and every gene of the alphabet (each transform with
each parameter value; an integer range at its ``Param.values``, maxnreg at its ladder of
budgets). Budget: ``max_evals`` cuts the list short in alphabet order.
"""

from __future__ import annotations

from genomes.genome import Genome


def start(search) -> dict:
    return {"generation": 0, "best": None}


def step(state: dict, search) -> dict:
    candidates = [Genome()] + [Genome((g,)) for g in search.alphabet()]
    results = search.evaluate(candidates, generation=1)
    best = min(zip(candidates, results), key=lambda gr: gr[1].fitness)
    return {"generation": 1, "best": [best[0].to_json(), _fit(best[1].fitness)]}


def finished(state: dict, search) -> bool:
    return state["generation"] >= 1 or search.budget_left() == 0


def best(state: dict):
    return tuple(state["best"]) if state["best"] else (Genome().to_json(), None)


def _fit(value: float):
    return None if value == float("inf") else value
