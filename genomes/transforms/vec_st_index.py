"""Merge scalar global stores whose addresses are computed one by one into vector
stores, where the launch's every thread shows them consecutive: ``vec_ld_index``'s
counterpart for stores.

Triton writes a tile's elements one by one where its axis analysis cannot show the
index contiguous, and ``coarsen_tile`` leaves k copies' stores side by side. The rule
(``genomes.lane_merge``): before any branch, a run of 2, 4 or 8 scalar ``st.global`` of
one opcode, guards holding the same value on every thread and one cache policy, whose
addresses evaluated for every thread of the launch are consecutive from an aligned first
one, becomes one store at the *last* of them: the earlier ones sink to it, provided no
memory access, barrier or scope lies between (any of them might alias the stores) and
their values and the first's address and guard stay as they were. Eight 2-byte elements
are packed into four words (``mov.b32 w, {lo, hi}``) and stored as ``v4.b32``.

The proof holds for the launch it was made with: the genome keeps that launch (a later
gene that would change it is a no-op, ``genomes.genome``).
"""

from __future__ import annotations

from genomes.lane_merge import merge
from genomes.ptx import Module
from genomes.transforms.base import Transform, launched


def apply(module: Module, launch) -> int:
    """Merge the launched entry's provably consecutive stores; how many vector stores."""
    entry = launched(module, launch)
    return merge(entry, launch, "st")


TRANSFORM = Transform(
    name="vec_st_index",
    group="st_index",
    summary="merge scalar global stores whose addresses are computed one by one (Triton's "
            "per-element index arithmetic) into vector stores, where evaluating that "
            "arithmetic for every thread of the launch shows them consecutive and aligned",
    applies_when="before any branch, 2, 4 or 8 consecutive scalar 2-, 4- or 8-byte global "
                 "stores of one opcode and guard, with no memory access between, whose "
                 "addresses on every thread of the launch that stores follow each other "
                 "from an aligned first one",
    params=(),
    apply=apply,
    reads_launch=True,
)
