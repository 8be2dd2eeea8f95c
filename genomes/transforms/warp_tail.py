"""The warp-synchronous tail of a shared-memory tree reduction: a block barrier whose both
sides touch memory from the first warp only becomes a warp barrier.

The classic reduction (CUDA's samples, most hand-written ``reduce`` kernels) halves the
active threads each step, ``if (tid < s) sdata[tid] += sdata[tid + s]; __syncthreads();``,
down to s = 1. From s = 32 on only the first warp works, yet every step still waits for
the whole block: the other warps cannot leave, and their slots cannot take a new block.
``warp_tail`` turns each such ``bar.sync 0`` into ``bar.warp.sync -1`` (what
``__syncwarp()`` compiles to: it orders shared and global memory among the warp's
threads), and only where this is proven from the PTX, not left to the gate's random
inputs (a race that the gate happens to miss would be a fast wrong kernel):

- the block is one-dimensional and a whole number of warps (so ``%tid.x <= 31`` is the
  first warp, and no lane of a warp is missing);
- the function has no indirect branch, no ``call``, no other kind of barrier, and every
  ``bar.sync`` is unpredicated, takes no thread count and is reached by every thread
  (no branch jumps across it, so the barriers cut the body into straight segments);
- a barrier is demoted only when the segments on both sides of it touch memory (any
  load, store or atomic but ``ld.param``/``ld.const``) from threads with ``%tid.x <= 31``
  alone: every such instruction sits under a guard ``@P bra L`` (or ``@!P``) whose
  predicate is a ``setp`` of a ``%tid.x`` copy against a constant that lets only those
  threads fall through (and no branch from outside jumps in), or is itself guarded by
  such a predicate.

Why that is enough: take two accesses from different threads that a barrier ordered. If a
block barrier still stands between them, it still orders them. If every barrier between
them was demoted, every segment between them (theirs included) touches memory from the
first warp only, so both threads are in that warp, and the chain of warp barriers orders
them.
"""

from __future__ import annotations

from genomes.launch import Launch
from genomes.ptx import Function, Instruction, Label, Line, Module
from genomes.transforms.base import NotApplicable, Transform, launched

WARP = 32
MAX_THREADS = 1024
_COMPARE = {"gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b,
            "le": lambda a, b: a <= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
            "hi": lambda a, b: a > b, "hs": lambda a, b: a >= b, "lo": lambda a, b: a < b,
            "ls": lambda a, b: a <= b}
_SWAPPED = {"gt": "lt", "ge": "le", "lt": "gt", "le": "ge", "eq": "eq", "ne": "ne",
            "hi": "lo", "hs": "ls", "lo": "hi", "ls": "hs"}
_MEMORY_OPS = frozenset("ld ldu st atom red cp tex tld4 suld sust sured prefetch prefetchu "
                        "ldmatrix stmatrix mbarrier wgmma".split())
_HARMLESS_SPACES = frozenset({"param", "const"})


def apply(module: Module, launch: Launch) -> tuple[int, Launch]:
    if launch.block[1:] != (1, 1) or launch.block[0] % WARP:
        raise NotApplicable(f"the block {list(launch.block)} is not one-dimensional in whole "
                            "warps")
    fn = launched(module, launch)
    barriers = _block_barriers(fn)
    if isinstance(barriers, str):
        raise NotApplicable(barriers)
    bounds = _tid_bounds(fn)
    # segments[k] runs from barrier k-1 (or the start) to barrier k (or the end)
    edges = [-1, *barriers, len(fn.body)]
    first_warp = [_first_warp_only(fn, edges[k] + 1, edges[k + 1], bounds)
                  for k in range(len(edges) - 1)]
    demoted = 0
    for k, line in enumerate(barriers):
        if first_warp[k] and first_warp[k + 1]:
            old = fn.body[line]
            fn.body[line] = Line(Instruction("bar.warp.sync", ("-1",)), old.before, old.after)
            demoted += 1
    if not demoted:
        raise NotApplicable("no block barrier has first-warp-only memory accesses on both "
                            "sides")
    return demoted, launch


def _block_barriers(fn: Function) -> list[int] | str:
    """Lines of the function's ``bar.sync 0``s, or why the function is out of reach."""
    labels = {ln.stmt.name: i for i, ln in enumerate(fn.body) if isinstance(ln.stmt, Label)}
    barriers, branches = [], []
    for i, ln in enumerate(fn.body):
        ins = ln.stmt
        if not isinstance(ins, Instruction):
            continue
        if ins.op in ("brx", "call"):
            return f"the function has {ins.op}"
        if ins.op == "bra":
            if ins.operands[0] not in labels:
                return f"a branch to an unknown label {ins.operands[0]}"
            branches.append((i, labels[ins.operands[0]]))
        elif ins.op in ("bar", "barrier") and ins.opcode != "bar.warp.sync":
            if ins.mods not in (("sync",), ("sync", "aligned")) or ins.pred \
                    or ins.operands != ("0",):
                return f"a barrier other than an unpredicated bar.sync 0: {ins.render()}"
            barriers.append(i)
    if not barriers:
        return "the function has no block barrier"
    for src, dst in branches:
        low, high = sorted((src, dst))
        if any(low < b < high for b in barriers):
            return "a branch crosses a barrier (a loop around it, or a barrier not every " \
                   "thread reaches)"
    return barriers


def _tid_bounds(fn: Function) -> dict[str, tuple[int, int]]:
    """For each predicate set once by comparing a copy of %tid.x with a constant: the
    largest %tid.x for which it is true and for which it is false (-1: never)."""
    defs: dict[str, int] = {}
    for ins in fn.instructions():
        for reg in ins.defs():
            defs[reg] = defs.get(reg, 0) + 1
    tid = {ins.operands[0] for ins in fn.instructions()
           if ins.op == "mov" and ins.operands[1:] == ("%tid.x",) and not ins.pred}
    tid = {r for r in tid if defs[r] == 1}
    bounds = {}
    for ins in fn.instructions():
        if ins.op != "setp" or ins.pred or len(ins.operands) != 3 \
                or defs.get(ins.operands[0]) != 1:
            continue
        cmp, kind = ins.mods[0], ins.mods[-1]
        pred, a, b = ins.operands
        if cmp not in _COMPARE or len(ins.mods) != 2 or kind[0] not in "subB":
            continue
        if a in tid and _integer(b) is not None:
            constant = _integer(b)
        elif b in tid and _integer(a) is not None:
            constant, cmp = _integer(a), _SWAPPED[cmp]
        else:
            continue
        if kind[0] != "s" and constant < 0:
            constant &= (1 << int(kind[1:])) - 1
        true_ids = [t for t in range(MAX_THREADS) if _COMPARE[cmp](t, constant)]
        false_ids = [t for t in range(MAX_THREADS) if not _COMPARE[cmp](t, constant)]
        bounds[pred] = (max(true_ids, default=-1), max(false_ids, default=-1))
    return bounds


def _integer(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        return None


def _first_warp_only(fn: Function, start: int, stop: int,
                     bounds: dict[str, tuple[int, int]]) -> bool:
    """Whether every memory access of fn.body[start:stop] runs in threads tid.x <= 31."""
    body = fn.body
    labels = {ln.stmt.name: i for i, ln in enumerate(body[start:stop], start)
              if isinstance(ln.stmt, Label)}
    sources: dict[int, list[int]] = {}
    for i in range(start, stop):
        ins = body[i].stmt
        if isinstance(ins, Instruction) and ins.op == "bra" and ins.operands[0] in labels:
            sources.setdefault(labels[ins.operands[0]], []).append(i)
    # (branch line, label line): only tid.x <= 31 falls through, and no branch from
    # outside jumps in between them
    guards = []
    for i in range(start, stop):
        ins = body[i].stmt
        end = labels.get(ins.operands[0], -1) if isinstance(ins, Instruction) \
            and ins.op == "bra" and ins.pred else -1
        if end > i and _bound(ins.pred, bounds, taken=False) < WARP \
                and all(i < s < end for k in range(i + 1, end) for s in sources.get(k, [])):
            guards.append((i, end))

    def guarded(i: int) -> bool:
        ins = body[i].stmt
        if ins.pred and _bound(ins.pred, bounds, taken=True) < WARP:
            return True
        return any(g < i < end for g, end in guards)

    for i in range(start, stop):
        ins = body[i].stmt
        if isinstance(ins, Instruction) and _touches_memory(ins) and not guarded(i):
            return False
    return True


def _bound(pred: str, bounds: dict[str, tuple[int, int]], taken: bool) -> int:
    """The largest tid.x that runs a guarded instruction (``taken``) or falls through a
    guarded branch (not ``taken``); MAX_THREADS where the predicate says nothing."""
    negated = pred.startswith("@!")
    reg = pred.lstrip("@!")
    if reg not in bounds:
        return MAX_THREADS
    when_true, when_false = bounds[reg]
    return when_true if taken != negated else when_false


def _touches_memory(ins: Instruction) -> bool:
    if ins.op in ("ld", "ldu") and ins.space in _HARMLESS_SPACES:
        return False
    return ins.op in _MEMORY_OPS or any(op.startswith("[") for op in ins.operands)


TRANSFORM = Transform(
    name="warp_tail",
    group="warp_tail",
    summary="turn block barriers whose both sides touch memory from the first warp only "
            "(a tree reduction's last steps) into warp barriers (bar.warp.sync), proven "
            "from the PTX",
    applies_when="1-D blocks of whole warps; bar.sync 0 every thread reaches, with "
                 "tid.x-guarded (<= 31) memory accesses on both sides",
    params=(),
    apply=apply,
    edits_launch=True,
)
