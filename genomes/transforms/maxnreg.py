"""Register budget: ``.maxnreg N`` on every entry.

Fewer registers can raise occupancy; too few spill to local memory (on the H200,
gemm_tile 8x8x8 at 64 registers ran 3x slower). ptxas treats the directive as a cap.
"""

from __future__ import annotations

import re

from genomes.ptx import Module
from genomes.transforms.base import Param, Transform

_MAXNREG = re.compile(r"[ \t]*\.maxnreg\s+\d+[ \t]*\n?")


def apply(module: Module, n: int) -> int:
    changed = 0
    for fn in module.entries:
        if fn.maxnreg == n:
            continue
        rest = _MAXNREG.sub("", fn.directives)
        # Keep the header's own line breaks: the directive goes on its own line before "{".
        if not rest.startswith("\n"):
            rest = "\n" + rest
        fn.directives = f"\n.maxnreg {n}" + rest
        changed += 1
    return changed


TRANSFORM = Transform(
    name="maxnreg",
    group="regs",
    summary="cap registers per thread with .maxnreg N",
    applies_when="every .entry (no change if it already has .maxnreg N)",
    # Budgets 32 apart in the alphabet; a mutation moves 8-32, a local search 8 or 16.
    params=(Param("n", default=128, low=16, high=255, ladder=(32, 64, 96, 128, 160, 192, 224, 255),
                  moves=(-32, -16, -8, 8, 16, 32)),),
    apply=apply,
)
