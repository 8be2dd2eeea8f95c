"""Occupancy hints for ptxas: ``.maxntid`` (the launch's block size) and ``.minnctapersm``.

``occupancy(blocks=b)`` states that the kernel runs blocks of exactly the launch's size
(``.maxntid x, y, z``) and asks for at least b resident blocks per SM (``.minnctapersm
b``), which lets ptxas budget registers for that occupancy (it may spill to meet it).
It needs the launch (a genome applied with its kernel's spec) and leaves it unchanged;
a kernel that already states ``.maxntid``, ``.reqntid`` or ``.minnctapersm`` keeps its
own. A later ``block`` gene that asks for larger blocks than ``.maxntid`` is a no-op.
"""

from __future__ import annotations

import re

from genomes.launch import Launch
from genomes.ptx import Module
from genomes.transforms.base import NotApplicable, Param, Transform, launched

BLOCKS_PER_SM = (1, 2, 4, 8)


def apply(module: Module, launch: Launch, blocks: int) -> tuple[int, Launch]:
    fn = launched(module, launch)
    if re.search(r"\.(maxntid|reqntid|minnctapersm)\b", fn.directives):
        raise NotApplicable("the kernel states its own block size or occupancy")
    x, y, z = launch.block
    if x * y * z * blocks > 2048:
        raise NotApplicable(f"{blocks} blocks of {x * y * z} threads exceed an SM's 2048 threads")
    # the directives go before the body's brace, on lines of their own
    fn.directives = fn.directives.rstrip("\n") + \
        f"\n.maxntid {x}, {y}, {z}\n.minnctapersm {blocks}\n"
    return 1, launch


TRANSFORM = Transform(
    name="occupancy",
    group="occupancy",
    summary="state the launch's block size (.maxntid) and ask for b resident blocks per SM "
            "(.minnctapersm), so ptxas budgets registers for that occupancy",
    applies_when="a genome applied with its kernel's launch, to a kernel without its own "
                 ".maxntid/.reqntid/.minnctapersm",
    params=(Param("blocks", default=2, choices=BLOCKS_PER_SM),),
    apply=apply,
    edits_launch=True,
)
