"""Merge scalar global loads whose addresses are computed one by one into vector loads,
where the launch's every thread shows them consecutive.

Triton gives each thread several elements of a tile and, where its axis analysis cannot
show an index contiguous (a ``cat`` of transposed inputs: ``(x - 768) // 64 % 12``...),
computes every element's address on its own and loads it with its own 2-byte load:
``vec_ld`` (one base register, constant offsets) does not see that the eight addresses
follow each other. This transform evaluates the index arithmetic of those addresses for
every thread of the launch (``genomes.lane_eval``: exact integer semantics, no sampling)
and merges a run of loads where, on every thread whose guard is true, load j reads
``address_0 + j * size`` and ``address_0`` is aligned to the vector's bytes (the pointer
parameter itself being ``PARAM_ALIGN``-aligned, the one assumption ``genomes.memory``
states).

The rule (``genomes.lane_merge``): before any branch, a run of 2, 4 or 8 scalar
``ld.global`` of one opcode, guards holding the same value on every thread and one cache
policy, proven consecutive as above, becomes one load at the *last* of them (the earlier
ones sink to it, so the default values a guarded load leaves in place are already
written). Eight 2-byte elements load as ``v4.b32``, unpacked with ``mov.b32 {lo, hi}``
under the same guard; other sizes as ``vN`` of their own type.

The proof holds for the launch it was made with: the genome keeps that launch (a later
gene that would change it is a no-op, ``genomes.genome``).
"""

from __future__ import annotations

from genomes.lane_merge import merge
from genomes.ptx import Module
from genomes.transforms.base import Transform, launched


def apply(module: Module, launch) -> int:
    """Merge the launched entry's provably consecutive loads; the number of vector loads."""
    entry = launched(module, launch)
    return merge(entry, launch)


TRANSFORM = Transform(
    name="vec_ld_index",
    group="ld_index",
    summary="merge scalar global loads whose addresses are computed one by one (Triton's "
            "per-element index arithmetic) into vector loads, where evaluating that "
            "arithmetic for every thread of the launch shows them consecutive and aligned",
    applies_when="before any branch, 2, 4 or 8 consecutive scalar 2-, 4- or 8-byte global "
                 "loads of one opcode and guard whose addresses, on every thread of the "
                 "launch that loads, follow each other from an aligned first one",
    params=(),
    apply=apply,
    reads_launch=True,
)
