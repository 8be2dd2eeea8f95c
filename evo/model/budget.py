"""A model's evaluations spent where its time is: ``[run] budget_evals`` (``evo run
--budget-evals N``) split over the kernels in proportion to their share of the step.

Kernels from a capture folder (``evo.capture``) weigh by the share of the step's GPU time
its manifest records (a code one launcher runs at several captured sizes, evolved once,
by the shares of all its sizes: ``evo.model.capture.same_code``); any other kernel of the
run weighs as the mean of those (all alike when the run has no capture). Each kernel gets at least ``floor`` evaluations (one
population: a search needs its first generation), the rest by largest remainders, so the
budgets add up to the total (or to ``floor`` x kernels, where that is more).
"""

from __future__ import annotations

import json
import math
from pathlib import Path


def shares(patterns: list[str]) -> dict[str, float]:
    """Spec name -> share of the step, for the kernels of the capture folders among
    ``patterns`` (as ``[run] suite`` names them)."""
    from evo.model.capture import MANIFEST, same_code

    out: dict[str, float] = {}
    for pattern in patterns:
        folder = Path(pattern).expanduser()
        if (folder / MANIFEST).is_file():
            kernels = json.loads((folder / MANIFEST).read_text())["kernels"]
            evolved_as = {name: names[0] for name, names in same_code(kernels).items()}
            for k in kernels:
                if k.get("share"):
                    name = evolved_as.get(k["name"], k["name"])
                    out[name] = out.get(name, 0.0) + float(k["share"])
    return out


def split_evals(total: int, names: list[str], weights: dict[str, float], floor: int) -> dict[str, int]:
    """Evaluations per kernel (module docstring)."""
    if not names:
        return {}
    known = [weights[n] for n in names if weights.get(n)]
    fill = sum(known) / len(known) if known else 1.0
    w = {n: weights.get(n) or fill for n in names}
    spare = max(0, total - floor * len(names))
    exact = {n: spare * w[n] / sum(w.values()) for n in names}
    budget = {n: floor + math.floor(exact[n]) for n in names}
    left = floor * len(names) + spare - sum(budget.values())
    for n in sorted(names, key=lambda n: (-(exact[n] - math.floor(exact[n])), names.index(n)))[:left]:
        budget[n] += 1
    return budget
