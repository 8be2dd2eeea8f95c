"""Search strategies: one module each, all with the same four functions.

A strategy drives one kernel's search, one generation at a time, through a
``KernelSearch`` (see ``evo.search``) that evaluates genomes and holds the seeded RNG:

    start(search) -> state        # a fresh search (evaluates nothing)
    step(state, search) -> state  # one generation: propose genomes, evaluate, select
    finished(state, search) -> bool
    best(state) -> (genome JSON, fitness)

``state`` is plain JSON data (lists, dicts, numbers, strings), so that a checkpoint is
just the states of every kernel plus the RNG states, and a resumed run continues
exactly where the interrupted one stood.
"""

from __future__ import annotations

import importlib
from types import ModuleType

NAMES = ("evolve", "greedy", "sweep", "oracle")


def get(name: str) -> ModuleType:
    if name not in NAMES:
        from genomes.errors import EvoError

        raise EvoError(f"unknown strategy {name!r}; choose one of {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}")
