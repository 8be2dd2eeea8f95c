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

A module may also declare (each optional):

    Options                       # a frozen dataclass of ``evo.options.opt`` fields: its
                                  # table in evo.toml, named after the module
    generations(config) -> int    # generations a search runs (progress bars); default 1
    BUDGET = ("max_steps",)       # its options a resumed run may raise

A strategy is one file: every module of this package is one, under its module name
(``NAMES``); config, CLI, run and bench read what they need from here.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

NAMES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)
                     if not m.name.startswith("_")))


def get(name: str) -> ModuleType:
    if name not in NAMES:
        from genomes.errors import EvoError

        raise EvoError(f"unknown strategy {name!r}; choose one of {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}")


def options() -> dict[str, type]:
    """Each strategy's options table (``Options``), by name, for those that have one."""
    return {name: get(name).Options for name in NAMES if hasattr(get(name), "Options")}


def generations(name: str, config) -> int:
    """Generations a search by strategy ``name`` under ``config`` runs (1 if it says not)."""
    count = getattr(get(name), "generations", None)
    return count(config) if count is not None else 1


def summary(name: str) -> str:
    """What strategy ``name`` is, in a few words: its docstring's first line, after the
    name ("Greedy: the classic sequential greedy search." -> "the classic ...")."""
    doc = (get(name).__doc__ or "").strip()
    head, _, rest = (doc.splitlines()[0] if doc else name).partition(": ")
    return (rest or head).rstrip(".").replace("``", "`")  # a terminal shows no reST


def budget_options(name: str) -> tuple[str, ...]:
    """Strategy ``name``'s options that a resumed run may raise (like [run] generations)."""
    return tuple(getattr(get(name), "BUDGET", ()))
