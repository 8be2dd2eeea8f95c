"""Oracle: every combination of at most one gene per conflict group (56,700 genomes a kernel) — the ceiling.

One "generation" evaluates the whole space (``genomes.variation.group_combinations``
over the Chronos transforms, ``CHRONOS_TRANSFORMS``: 4 x 3 x 7 x 5 x 9 x 5 x 3 = 56,700
genomes per kernel, the same ceiling however the library grows), in
chunks, so that the store's PTX- and code-level deduplication keeps the GPU work to the
distinct machine code. Meant for a few kernels in ``evo bench``, not for ``evo run``.

With ``[oracle] genomes`` (``evo bench --oracle-genomes``), a plan from ``evo.oracle_plan``
that grouped the same space by machine code on the CPU, it evaluates one genome of each
group instead: every other genome runs the same code as the one measured, so the best is
the same. The GPU measures the same distinct code either way; what is saved is the GPU
host's ptxas and apply time (gemm_tile_4x4x4: 10,130 compiles instead of 42,525).

| option   | default | meaning                                       |
| -------- | ------- | --------------------------------------------- |
| CHUNK    | 512     | genomes per evaluation batch (progress, memory)|
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from genomes.errors import EvoError
from genomes.genome import Genome, parse_inline
from genomes.variation import CHRONOS_TRANSFORMS, gene_alphabet, group_combinations

from evo.options import opt

@dataclass(frozen=True)
class Options:
    """``[oracle]`` in evo.toml (``evo.config`` reads it through ``evo.strategies``)."""

    genomes: str = opt("", doc="a plan written by python3 -m evo.oracle_plan: measure one "
                                "genome per distinct machine code of the oracle's space, "
                                "grouped by ptxas on the CPU ('' = every genome)")

CHUNK = 512
# the kernels evo bench runs the oracle on by default: four gemm tiles, small to large
KERNELS = ("gemm_tile_4x4x4", "gemm_tile_4x6x8", "gemm_tile_6x6x6", "gemm_tile_2x4x8")


def start(search) -> dict:
    return {"generation": 0, "best": None}


def step(state: dict, search) -> dict:
    best_genome, best_fit = Genome(), math.inf
    plan = search.config.oracle.genomes
    combos = (planned_genomes(plan, search.kernel) if plan
              else group_combinations(gene_alphabet(names=CHRONOS_TRANSFORMS)))
    while chunk := list(itertools.islice(combos, CHUNK)):
        for genome, m in zip(chunk, search.evaluate(chunk, generation=1)):
            if m.fitness < best_fit:
                best_genome, best_fit = genome, m.fitness
        if search.budget_left() == 0:
            break
    return {"generation": 1,
            "best": [best_genome.to_json(), None if math.isinf(best_fit) else best_fit]}


def finished(state: dict, search) -> bool:
    return state["generation"] >= 1


def best(state: dict):
    return tuple(state["best"]) if state["best"] else (Genome().to_json(), None)


def planned_genomes(path: str, kernel: str):
    """The plan's genomes for ``kernel`` (``evo.oracle_plan``), in the plan's order."""
    from evo.oracle_plan import load_plan

    entry = load_plan(path)["kernels"].get(kernel)
    if entry is None:
        raise EvoError(f"the oracle plan {path} has no entry for {kernel}: "
                       f"python3 -m evo.oracle_plan --kernels {kernel} -o {path}")
    return (parse_inline(text) for text in entry["representatives"])
