"""Another number of threads per block, the grid kept: for kernels that split their work by
``blockDim`` (one block per row, say, with ``for (c = tid; c < cols; c += blockDim.x)`` and a
reduction over ``blockDim.x / 32`` warps).

``threads(n)`` launches the same blocks with n threads each. Unlike ``block`` (which keeps
the set of global indices and is correct by construction), this gene changes how many
threads share a block's work, so it is only as correct as the kernel is general in
``blockDim``: the correctness gate decides, on fresh random inputs, as it does for every
variant. What can be seen in the PTX is checked first: the launched entry must read
``%ntid.x`` (a kernel that never reads it has a fixed split, and fewer or more threads would
drop or repeat work), must not read ``%ntid.y``/``.z``, and must not offset its blocks by
``ctaid.x * ntid.x`` (a global-index kernel, where ``block`` applies: with the grid kept,
another block size would leave elements out). A
kernel with shared memory may only get fewer threads (an array sized for the old block
indexed by thread stays in bounds); ``.reqntid`` and a ``.maxntid`` below n rule it out.

The PTX is unchanged: the gene lives in the launch (stored, keyed and shown with it).
"""

from __future__ import annotations

import re

from genomes.launch import Launch
from genomes.ptx import Instruction, Module
from genomes.thread_index import global_index
from genomes.transforms.base import NotApplicable, Param, Transform, launched

THREADS = (64, 128, 256, 512, 1024)
_SHARED = re.compile(r"\.shared\b")


def apply(module: Module, launch: Launch, threads: int) -> tuple[int, Launch]:
    if launch.block[1:] != (1, 1):
        raise NotApplicable(f"the block ({list(launch.block)}) is not one-dimensional")
    fn = launched(module, launch)
    if threads == launch.block[0]:
        raise NotApplicable(f"the block already has {threads} threads")
    reads = {op for ins in fn.instructions() for op in ins.operands
             if isinstance(ins, Instruction) and op.startswith("%ntid")}
    if "%ntid.x" not in reads:
        raise NotApplicable("the kernel never reads %ntid.x: its split of the work does not "
                            "follow the block size")
    if reads - {"%ntid.x"}:
        raise NotApplicable(f"the kernel reads {', '.join(sorted(reads - {'%ntid.x'}))}")
    if not isinstance(global_index(fn), str) or _block_offset(fn):
        raise NotApplicable("the kernel indexes by ctaid.x * ntid.x: other blocks of another "
                            "size would leave elements out (block(n) keeps them)")
    if ".reqntid" in fn.directives:
        raise NotApplicable(".reqntid fixes the block size")
    if fn.maxntid and threads > fn.maxntid:
        raise NotApplicable(f".maxntid {fn.maxntid} allows no block of {threads}")
    if threads > launch.block[0] and _SHARED.search(module.render()):
        raise NotApplicable("shared memory sized for the block: only fewer threads are safe")
    return 1, launch.with_shape(launch.grid, (threads, 1, 1))


def _block_offset(fn) -> bool:
    """True when one instruction combines copies of %ctaid.x and %ntid.x (a block offset
    ``ctaid.x * ntid.x``: each block's share of the elements is its size)."""
    copies: dict[str, str] = {}
    for ins in fn.instructions():
        if ins.op == "mov" and len(ins.operands) == 2 and ins.operands[1] in ("%ctaid.x",
                                                                           "%ntid.x"):
            copies[ins.operands[0]] = ins.operands[1]
        elif {"%ctaid.x", "%ntid.x"} <= {copies.get(o, o) for o in ins.operands[1:]}:
            return True
    return False


TRANSFORM = Transform(
    name="threads",
    group="block",
    summary="launch the same blocks with another number of threads (checked by the gate)",
    applies_when="1-D blocks of kernels that read %ntid.x to split their work and are not "
                 "plain global-index kernels; with shared memory only fewer threads",
    params=(Param("threads", default=128, choices=THREADS),),
    apply=apply,
    edits_launch=True,
)
