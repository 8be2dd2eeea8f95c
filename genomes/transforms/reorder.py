"""reorder: list scheduling of every basic block over its dependence DAG.

Algorithm (per block, see ``genomes.dag`` for the edges): keep the set of *ready* nodes
(every predecessor already placed); repeatedly take the best ready node by the strategy's
key, append it, and release its successors. Every key ends in the node's original
position, so the result is deterministic and a strategy with nothing to prefer keeps the
original order. Keys:

* ``critical_path``: the longest latency-weighted path to the block's end first (long
  global-load chains start early, short arithmetic fills in behind them);
* ``loads_first``: any ready load (or prefetch) first, else original order: every load is
  hoisted as high as its address and aliasing stores allow;
* ``stores_last``: any ready non-store first, else original order: stores sink as low as
  the loads, barriers and terminator that depend on them allow;
* ``interleave``: alternate memory ops and the rest (arithmetic) whenever both are ready,
  each stream in original order, starting with memory.

Lines are moved, not re-rendered, so every instruction keeps its exact text, comments
and whitespace; labels, branches, barriers, braces and directives never move.

PTX order is only a hint: ptxas schedules again. The point is to give ptxas a different
starting point (register allocation and its own list scheduler follow PTX order), which
the search measures rather than predicts.
"""

from __future__ import annotations

import heapq

from genomes.dag import Dag, build_dag
from genomes.memory import PointerInfo, basic_blocks
from genomes.ptx import Module
from genomes.transforms.base import Param, Transform

STRATEGIES = ("critical_path", "interleave", "loads_first", "stores_last")
_MEMORY = frozenset({"load", "store", "prefetch"})


def schedule(dag: Dag, strategy: str) -> list[int]:
    """A topological order of ``dag``'s nodes chosen by ``strategy`` (see module doc)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)} (got {strategy!r})")
    kinds = dag.kinds
    if strategy == "critical_path":
        cp = dag.critical_path_lengths()
        key = lambda k: (-cp[k], k)  # noqa: E731
    elif strategy == "loads_first":
        key = lambda k: (kinds[k] not in ("load", "prefetch"), k)  # noqa: E731
    elif strategy == "stores_last":
        key = lambda k: (kinds[k] == "store", k)  # noqa: E731
    else:
        key = lambda k: (k,)  # noqa: E731
    # interleave keeps two ready queues (memory / other); the others use one.
    two = strategy == "interleave"
    lane = (lambda k: kinds[k] in _MEMORY) if two else (lambda k: False)
    ready: dict[bool, list] = {False: [], True: []}

    waiting = [len(p) for p in dag.preds]
    for k in range(len(dag)):
        if not waiting[k]:
            heapq.heappush(ready[lane(k)], (key(k), k))
    order: list[int] = []
    last_was_memory = False  # so interleave opens with memory: loads start their latency
    while ready[False] or ready[True]:
        want = not last_was_memory
        queue = ready[want] if ready[want] else ready[not want]
        _, k = heapq.heappop(queue)
        order.append(k)
        last_was_memory = lane(k)
        for s in dag.succs[k]:
            waiting[s] -= 1
            if not waiting[s]:
                heapq.heappush(ready[lane(s)], (key(s), s))
    if len(order) != len(dag):  # only a cyclic graph could get here: a bug in build_dag
        raise RuntimeError("dependence graph has a cycle")
    return order


def apply(module: Module, strategy: str = "critical_path") -> int:
    """Reschedule every basic block of every function; return how many blocks changed."""
    changed = 0
    for fn in module.functions:
        info = PointerInfo(fn)  # def counts do not change when lines move within blocks
        for block in basic_blocks(fn):
            dag = build_dag(fn, block, info)
            order = schedule(dag, strategy)
            if order == list(range(len(dag))):
                continue
            lines = [fn.body[i] for k in order for i in dag.groups[k]]
            lines += [fn.body[i] for i in dag.tail]
            assert len(lines) == len(block)  # groups + tail partition the block
            if lines == fn.body[block.start:block.stop]:
                continue  # only identical lines swapped (two equal prefetches): no change
            fn.body[block.start:block.stop] = lines
            changed += 1
    return changed


TRANSFORM = Transform(
    name="reorder",
    group="schedule",
    summary="list-schedule the instructions of each basic block over a def-use and "
            "memory-order DAG (critical_path, interleave, loads_first, stores_last)",
    applies_when="a basic block holds independent instructions the strategy would put in "
                 "another order; nothing crosses labels, branches, bar.sync/atomics/fences, "
                 "scope braces, or a store that may alias",
    params=(Param("strategy", default="critical_path", choices=STRATEGIES),),
    apply=apply,
)
