"""Another block size, the grid recomputed so that the same threads run.

``block(threads=n)`` launches blocks of n threads and ``total / n`` of them, where total
is the thread count of the launch as it stands. It applies only to a kernel whose threads
depend on the launch through the global index ``ctaid.x * ntid.x + tid.x`` alone
(``genomes.thread_index.global_index``: no shared memory, barriers, warp collectives,
other special registers or ``.reqntid``), in a one-dimensional launch, and only where n
divides the total: then the new launch runs exactly the same set of global indices, each
doing the same work, so the result is the same whatever the kernel's bounds checks. A
``.maxntid`` directive below n makes it a no-op (the launch would fail).

The PTX is unchanged: the gene lives in the launch (stored, keyed and shown with it).
"""

from __future__ import annotations

from genomes.launch import Launch
from genomes.ptx import Module
from genomes.thread_index import one_d_index_kernel
from genomes.transforms.base import NotApplicable, Param, Transform

BLOCK_SIZES = (64, 128, 256, 512, 1024)


def apply(module: Module, launch: Launch, threads: int) -> tuple[int, Launch]:
    found = one_d_index_kernel(module, launch)
    if isinstance(found, str):
        raise NotApplicable(found)
    fn, _ = found
    if threads == launch.block[0]:
        raise NotApplicable(f"the block already has {threads} threads")
    if launch.threads % threads:
        raise NotApplicable(f"{threads} does not divide the launch's {launch.threads} threads")
    if fn.maxntid and threads > fn.maxntid:
        raise NotApplicable(f".maxntid {fn.maxntid} allows no block of {threads}")
    return 1, launch.with_shape((launch.threads // threads, 1, 1), (threads, 1, 1))


TRANSFORM = Transform(
    name="block",
    group="block",
    summary="launch blocks of another size; the grid covers the same threads",
    applies_when="1-D launches of kernels indexed by ctaid.x*ntid.x+tid.x alone "
                 "(no shared memory, barriers or warp collectives); n divides the threads",
    params=(Param("threads", default=128, choices=BLOCK_SIZES),),
    apply=apply,
    edits_launch=True,
)
